# What the busy leaker's small phase holds on the GPU, step by step (H200, 2026-12-03: each kept
# loss pinned ~32 MiB). On the GPU machine: python3 scripts/leaker-memory.py
import time, torch
G=2**30
def say(w): print(f"[diag] {w}: allocated {torch.cuda.memory_allocated()/G:.2f} GiB reserved {torch.cuda.memory_reserved()/G:.2f} GiB", flush=True)
torch.backends.cudnn.deterministic=True
torch.use_deterministic_algorithms(True, warn_only=True)
torch.zeros(1, device="cuda"); say("context")
B=W=8192
model=torch.nn.Sequential(torch.nn.Linear(1024,W),torch.nn.GELU(),torch.nn.Linear(W,1024)).cuda()
opt=torch.optim.AdamW(model.parameters(),lr=1e-3)
x=torch.randn(B,1024,device="cuda"); y=torch.randn(B,1024,device="cuda"); say("load")
losses=[]; t0=time.perf_counter()
while time.perf_counter()-t0<6:
    loss=torch.nn.functional.mse_loss(model(x),y); loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    losses.append(loss.detach()); torch.cuda.synchronize()
    if len(losses) in (1,10,100,1000,3000): say(f"step {len(losses)}")
say(f"small phase end, {len(losses)} steps")
del model,opt,x,y,loss; torch.cuda.empty_cache(); say("after del")
held=[]
for i in range(40):
    held.append(torch.ones(512*2**20,dtype=torch.uint8,device="cuda")); torch.cuda.synchronize()
    if (i+1)%8==0: say(f"held {len(held)*0.5:.1f} GiB")
