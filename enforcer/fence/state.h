/*
 * The fence's shared state. Per GPU: a control copy (control.c) that only the enforcer writes
 * (each task's guarantee, limit, keep, generation and token hash, whether its waits are heeded,
 * its guarantee sealed and its borrowing seen, the budget, the wait), and
 * per task placed on it an accounting file of its own, "<dir>/<token hash>/<GPU>.fence", that
 * only that task's processes and the enforcer write (its process slots, its sums, its waiting
 * flags, its lock), and a lock file, "<dir>-live/<token hash>/<GPU>.<inode>.live", named for
 * the inode of the accounting file it pairs with, whose byte locks say which of its processes
 * are alive. Tasks get the fence directory read-only with their own
 * accounting directory writable on top, and their own lock directory alone of "<dir>-live"
 * (fence.TaskMounts): a task can change only its own accounting, and lock only its own bytes. The
 * same code serves both sides (the LD_PRELOAD library and, through cgo, the Go enforcer), so
 * the layout has one definition. It is split by what each part owns: table.c a task's file and
 * its process slots, charge.c the allocation rules, peers.c the other tasks' files as the rules
 * read them, tasks.c the enforcer's side, lock.c the lock, control.c the control copy.
 *
 * Why it is built this way:
 * - An accounting file keeps the layout the one shared table had (struct gf_table), with one
 *   task slot live: the one its task holds in the control copy. The lock, the rules, the
 *   recount and the reaper work on it unchanged, and a task's lock serialises that task's
 *   processes alone: a task that keeps its own lock slows nobody else.
 * - Every counter of a file changes under its lock word. The critical sections hold loads and
 *   stores over at most the 512 process slots and no system call, so a compare-and-swap lock
 *   costs tens of nanoseconds.
 * - The lock word names its holder uniquely over time: an owner index (an OFD-locked byte the
 *   map holds for its whole life, taken before it ever locks) and a nonce drawn once per map
 *   from a counter in the header. A holder is dead when nobody holds its index's byte, or when
 *   whoever holds it now drew another nonce; a process that dies anywhere inside a critical
 *   section, whatever slot it had or was giving back, leaves a lock the next locker takes over.
 * - Liveness comes from the kernel, not from PIDs: a process that owns a slot holds an
 *   open-file-description (OFD) write lock on one byte of its task's lock file, which the kernel
 *   drops when the process dies, however it dies, and which means the same thing in every PID
 *   namespace (a task in a container sees other PIDs than the host). A slot whose byte can be
 *   locked belongs to a dead process, and its bytes go back to its task.
 * - The bytes live in a file of their own because every task may open every accounting file
 *   read-only (it reads them to borrow), and a read-only descriptor may still take read locks:
 *   a neighbour that read-locked every free byte kept the task's new processes from attaching.
 *   Only the task's own mount reaches its lock file. For the same reason the enforcer's claim
 *   on a GPU is a lock on "<dir>-enforcer/<GPU>.lock", which no task is given, not on the
 *   control copy that every task reads.
 * - A live holder that keeps the lock (stopped, or hostile) is waited for GF_LOCK_WAIT_NS by its
 *   own task's processes, then the waiter goes on without the file; the enforcer never takes it
 *   to read (below). Nothing hangs on it. A lock that is taken again and again, even by the
 *   same holder, is not kept: a counter in the header tells the two apart, so heavy contention
 *   inside one task makes its processes wait their turn instead of going on unfenced.
 * - The enforcer never maps a task's file: a task may truncate its own, and a mapping would fault
 *   (SIGBUS) and end every tenant's enforcement. It reads with pread, and what it writes under a
 *   task's lock a child process it forks writes (taskfile.c).
 * - A task's sum is kept beside the per-process sums and rebuilt from them whenever a lock
 *   holder died mid-update, so nothing underflows or counts twice.
 * - Borrowing reads the other tasks' files read-only and claims before it checks (charge.c);
 *   borrowers among themselves take a bounded flock on the control copy's read-only descriptor.
 * - Files hold SHA-256 hashes of tokens, never tokens. docs/enforcement.md, "Threat model", says
 *   what a hostile task can still do.
 */
#ifndef GPUFRAC_FENCE_STATE_H
#define GPUFRAC_FENCE_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "sha256.h"

#define GF_MAGIC 0x3165636e65666667ULL /* "gffence1" */
#define GF_VERSION 16
/* How many processes a task may have started since the enforcer last saw its processes on the
 * GPU (a watchdog pass): its file's count is believed up to that many more (gf_task.seen). */
#define GF_NEW_PROCS 4
#define GF_TASKS 64
#define GF_PROCS 512
#define GF_TOKEN_MAX 72
#define GF_UUID_MAX 64

/* The bytes of a task's lock file whose OFD write locks mark a live owner (the file is empty:
 * locks past its end are allowed). Owner indexes: each map of the accounting file (a process's,
 * the enforcer's child's) holds byte GF_OWNER_BASE + index for its whole life; the lock word
 * names that index. More than the process slots: attaches in flight map the file without a
 * slot. A process that owns slot i holds byte GF_LIVE_BASE + i. */
#define GF_OWNERS 1024
#define GF_OWNER_BASE 0LL
#define GF_LIVE_BASE ((long long)GF_OWNERS)

enum { GF_FREE = 0, GF_LIVE = 1 };

/* What a process's allocation waits for. GF_WAIT_STAGE: its task is staged (gf_task.stage) and
 * the allocation would pass what it holds so far; it waits for the enforcer to grant the rest, and
 * holds nobody up meanwhile (not in nwait). GF_WAIT_GRACE: an owner's allocation found what was lent
 * of its guarantee held by borrowers (lend) and waits quietly for them to end on their own, unarmed
 * while its task has been served nothing (charge.c): it refuses nobody, and borrowers' can_wait
 * does not count it among the stuck (nwait); ngrace counts it. */
enum { GF_WAIT_NONE = 0, GF_WAIT_BORROW = 1, GF_WAIT_OWED = 2, GF_WAIT_GRACE = 3, GF_WAIT_STAGE = 4 };

/* gf_blocks says whether a wait counts in its task's nwait: one that holds memory still. */
static inline int gf_blocks(uint32_t waiting)
{
	return waiting == GF_WAIT_BORROW || waiting == GF_WAIT_OWED;
}


/* How long an allocation within its task's guarantee may wait for borrowers to give the memory
 * back: the enforcer stops a borrower that does not within a watchdog pass or two, so this only
 * bounds a wait nobody serves (no enforcer running). */
#define GF_OWED_WAIT_NS (120ull * 1000000000ull)

/* How long an allocation of a staged task waits for its guarantee: gpufrac run grants it as soon
 * as the memory is free, or stops a staged job that blocks a borrower, so this only bounds a wait
 * nobody serves (the run died). */
#define GF_STAGE_WAIT_NS (3600ull * 1000000000ull)

/* Failures of gf_create and gf_attach besides -1 (a system call failed). */
#define GF_ERR_CORRUPT (-2)
#define GF_ERR_BUSY (-3)
#define GF_ERR_NOTASK (-4) /* gf_attach: the control copy places no task with the token */
#define GF_ERR_LOCKED (-5) /* a live process kept the table's lock GF_LOCK_WAIT_NS */

/* How long a lock kept by one live holder is waited for. Critical sections last nanoseconds, so
 * only a stopped holder (SIGSTOP, a debugger) or a hostile one keeps it this long; the waiter
 * then goes on without the table (an allocation passes unfenced, the watchdog holds the cap)
 * rather than hang every process on the GPU. */
#define GF_LOCK_WAIT_NS (1000000000ull)
/* How long the enforcer tries for a settled copy of a task's file before it takes the copy as it
 * is (a snapshot), and how long its child waits for the task's lock before it leaves the file
 * for the next pass (a reap, a rebuild): a task that keeps its own lock slows a watchdog pass by
 * this much a file, never hangs it. Hard: a lock that changes hands all along does not extend
 * it. */
#define GF_ENFORCER_WAIT_NS (20000000ull)
/* How long a borrowing allocation waits for the other borrowers' flock (they judge one at a
 * time) before it is refused: a borrower that keeps it fails others' borrows, never a
 * guarantee. */
#define GF_BORROW_WAIT_NS (200000000ull)

/* Results of gf_charge. GF_OK_OWED is GF_OK after a wait for borrowers to give the bytes back:
 * the driver may still be releasing a stopped borrower's memory, so a caller retries its real
 * allocation a moment (fence.c). GF_BUSY: the lock could not be had (GF_LOCK_WAIT_NS), nothing
 * was counted, and the allocation goes on unfenced. */
enum { GF_OK = 0, GF_REFUSED = 1, GF_NOTASK = 2, GF_OK_OWED = 3, GF_BUSY = 4 };

/* Results of gf_set_tasks besides a count of tasks placed. */
#define GF_SET_FULL (-1)   /* no free task slot, or more specs than slots */
#define GF_SET_NOROOM (-2) /* a new or raised guarantee would cover memory borrowers hold */
#define GF_SET_NOFILE (-3) /* a task's accounting or lock file could not be made (gf_gpu.file_errno) */

struct gf_task {
	uint32_t state; /* GF_FREE or GF_LIVE */
	uint32_t gen;   /* bumped at each placement in the slot: a new token, or fresh files */
	uint64_t cap;   /* the task's guarantee: its allocations may always reach it */
	uint64_t limit; /* the most it may reach by borrowing memory no guarantee covers; >= cap */
	uint64_t used;  /* bytes its live processes hold through fenced calls */
	uint64_t peak;
	uint64_t refused; /* allocations refused */
	/* the most a refused allocation would have taken the task to (its use then plus the bytes
	 * asked for): what a re-run needs, where the use it reached says less */
	uint64_t asked;
	uint64_t procs;   /* live process slots */
	uint64_t waits;   /* allocations that waited for borrowable memory */
	/* Until the task's use passes keep bytes (what its CUDA contexts take, which the fence does
	 * not see, and a first small allocation), borrowers may use its guarantee but for its use
	 * and keep; armed is set from then on. An owner that then finds its guarantee taken waits,
	 * and the borrowers give it back (gf_charge). keep >= cap means nothing of it is lent. */
	uint64_t keep;
	uint64_t armed;
	uint64_t owed; /* allocations within the guarantee that waited for borrowers to give back */
	uint64_t nwait; /* its live processes with a waiting allocation: can_wait reads it, not 512 slots */
	uint64_t nowed; /* ... of which wait for borrowers to give its guarantee back (GF_WAIT_OWED) */
	uint64_t ngrace; /* its live processes waiting out a grace (GF_WAIT_GRACE; not in nwait) */
	uint64_t gwant;  /* what those waits ask for, together: borrowers leave it free (charge.c) */
	/* what its processes' waiting borrows ask for, together: a borrower holding more borrowed
	 * memory leaves it free where it fits (charge.c) */
	uint64_t bwant;
	/* A staged task (gpufrac run's early start) was placed with a small guarantee (cap) so that
	 * its process does its CPU start-up while the memory it needs is still taken; stage is the
	 * guarantee it is promised, which memory-info calls report. An allocation past cap waits
	 * (GF_WAIT_STAGE) until the enforcer raises cap and clears stage: never refused for it,
	 * never borrowing. 0: placed in full. From the control copy only. */
	uint64_t stage;
	/* The processes of the task the enforcer saw on the GPU at its last look (NVML): its
	 * contexts are counted by them, whatever procs says (gf_counted). From the control copy
	 * only. */
	uint64_t seen;
	/* Set by the enforcer where the task's waits have lasted past any bound an honest wait
	 * keeps (a task writes its own file, and a wait it made up would otherwise stop new
	 * guarantees, or every borrower, on the GPU for as long as it liked): no other task's rules
	 * count them, neither borrowers (gf_peers_view) nor the placing of guarantees. From the
	 * control copy only. */
	uint64_t unheeded;
	/* Set by the enforcer once it knows the task armed: its file said so, NVML showed it hold
	 * past its keep and contexts, or a borrower was stopped for its owed wait. Whether a task
	 * is armed is otherwise its own file's word, and one that never said so would have its
	 * guarantee lent, then claimed back by stopping a borrower, again and again; an honest task
	 * lends it once, in its start-up. Every rule that lends reads a sealed task as armed
	 * (gf_peers_view, the placing of guarantees); an owner's allocation within its guarantee
	 * still counts it at its use and keep (judge, charge.c), as arming never changed that. The
	 * enforcer keeps it sealed for the rest of the placement. From the control copy only. */
	uint64_t sealed;
	/* Set by the enforcer (0: not set) while an owner waits for its guarantee (GF_WAIT_OWED) and
	 * this task says it borrows past what NVML showed its processes hold at the enforcer's last
	 * two looks, which could name every process on the GPU (nothing, where none of it is
	 * there): the rest is no memory anybody holds (a task writes its own file), and the
	 * watchdog, which believes a borrow only that far, would stop nobody for the owners waiting
	 * on it, who would be refused inside their guarantees once their owed wait ran out. The
	 * other tasks' rules then believe its use up to this, or its guarantee where that is more
	 * (gf_peers_view). Only while an owner waits, when no task may borrow more: a borrower's new
	 * process cannot be hidden by it. The rules heed it only while some task is owed, as the
	 * enforcer sets it: the enforcer takes it back only at its next pass. From the control copy
	 * only. */
	uint64_t unseen;
	/* in gf_snapshot's table only: GF_READ_UNSETTLED, its file was read without a settled copy
	 * (its lock kept, or changing all along); GF_READ_BAD, its file could not be read at all;
	 * GF_READ_UNOPENED, the enforcer could not open its file (left as it is until it can) */
	uint64_t unlocked;
	/* SHA-256 of the reservation's token: every task reads the files, and a token read here
	 * would let one task attach as another (take its cap, charge it its use). */
	uint8_t token_hash[GF_HASH_LEN];
};

struct gf_proc {
	uint32_t state;
	uint32_t task;
	uint32_t task_gen;
	int32_t pid;   /* in the process's own PID namespace: for people, never for liveness */
	uint32_t pgen; /* bumped when the slot is given back, so an owner can tell it lost it */
	/* GF_WAIT_BORROW while an allocation of this process waits for borrowable memory,
	 * GF_WAIT_OWED while one within its guarantee waits for borrowers to give that back */
	uint32_t waiting;
	/* while it waits out a grace or to borrow, the bytes it asks for (gwant, bwant); while it
	 * waits for its guarantee back (GF_WAIT_OWED), too, in no sum: the enforcer reads it to
	 * judge whether the memory it waits for is really short */
	uint64_t wanted;
	uint64_t used;
	uint64_t peak;
	uint64_t allocs;
	uint64_t refused;
};

struct gf_header {
	uint64_t magic;
	uint32_t version;
	uint32_t header_size;
	uint32_t task_size;
	uint32_t proc_size;
	uint32_t ntasks;
	uint32_t nprocs;
	uint64_t lock;  /* 0 = free, else the holder: its nonce << 32 | its owner index + 1 */
	uint32_t epoch; /* bumped by every recovery from a holder that died */
	uint32_t nonces; /* the last nonce drawn: every map draws the next one */
	uint64_t total;  /* the GPU's memory */
	uint64_t budget; /* what guarantees and borrowing may fill together; 0 = no borrowing */
	uint64_t recoveries;
	uint64_t underflows; /* frees of more than was charged: a bug somewhere, counted not hidden */
	uint64_t reaped;     /* slots of dead processes given back */
	/* Bumped by every taking of the lock: a waiter that sees the same holder twice tells one
	 * that keeps the lock from one that took it again since (gf_lock). */
	uint64_t takes;
	/* How long an allocation that would borrow memory that is not free may wait for it; 0 = it
	 * fails at once. While one waits, no new guarantee is placed (gf_set_tasks). */
	uint64_t wait_ns;
	/* in gf_snapshot's table only: the control copy's context per process and spare */
	uint64_t ctx, spare;
	char uuid[GF_UUID_MAX];
};

struct gf_table {
	struct gf_header h;
	struct gf_task tasks[GF_TASKS];
	struct gf_proc procs[GF_PROCS];
	uint32_t owners[GF_OWNERS]; /* the nonce of each owner index's holder */
};

struct gf_control;
struct gf_peers;

/* One process's (or the enforcer's) view of one accounting file. */
struct gf_map {
	int fd;
	int lfd; /* its task's lock file: the owner and liveness bytes (read-write where it locks) */
	struct gf_table *t;
	struct gf_control *c; /* the control copy (control.c), or NULL: a private table */
	int cfd;              /* the control copy's read-only descriptor, which borrowers flock */
	struct gf_peers *peers; /* the other tasks' files, read-only (peers.c), or NULL */
	uint64_t wait_ns;       /* how long gf_lock waits for a live holder; 0 = GF_LOCK_WAIT_NS */
	uint64_t budget;        /* the control copy's, as the last restore read it */
	uint64_t ctx, spare;    /* the control copy's context per process and spare, likewise */
	uint64_t grace_ns;      /* its task's, from the control copy, as the last restore read it */
	uint64_t stage;         /* its task's stage (gf_task.stage), as the last restore read it */
	int graced;             /* a grace ran out in this process: later owed waits begin at once */
	uint64_t me;   /* what the lock word holds while this map holds the lock */
	int owner;     /* the owner index whose byte it holds */
	int slot;      /* the proc slot this process owns, or -1 */
	int task;      /* the task slot it charges, or -1 */
	uint32_t task_gen;
	uint32_t pgen;
	uint64_t pending; /* bytes freed while the lock could not be had, given back at the next */
	int unwait;       /* a wait ended without the lock: its flag is cleared at the next */
	int why;          /* why the last refusal refused (GF_WHY_*), for the process's message */
	uint64_t waited_ns; /* how long the refused allocation waited before it */
};

/* Why gf_charge refused: a task's message says it, so an operator (and a test) can tell a
 * borrower that waited out its bound from one refused because an owner needed the memory back. */
enum {
	GF_WHY_NONE = 0,
	GF_WHY_LIMIT,     /* past the task's limit (its cap, where it may not borrow) */
	GF_WHY_NO_WAIT,   /* nothing borrowable is free and borrowers do not wait */
	GF_WHY_HOPELESS,  /* nothing borrowable is free and no task that could free some is running */
	GF_WHY_WAITED,    /* it waited its whole bound for borrowable memory */
	GF_WHY_RECLAIM,   /* an owner waits for memory borrowers took: nothing is lent meanwhile */
	GF_WHY_LOCKED,    /* another borrower kept the borrowers' lock past its bound */
	GF_WHY_UNREAD,    /* the other tasks' use could not be read */
	GF_WHY_OWED,      /* an owner waited its whole bound for borrowers to give its guarantee back */
	GF_WHY_STAGED,    /* its task stayed staged for GF_STAGE_WAIT_NS: nobody granted its guarantee */
};
/* gf_why_text says a GF_WHY_* in words. */
const char *gf_why_text(int why);

enum { GF_READ_SETTLED = 0, GF_READ_UNSETTLED = 1, GF_READ_BAD = 2, GF_READ_UNOPENED = 3 };

/* A task as the enforcer declares it. */
struct gf_task_spec {
	const char *token;
	uint64_t cap;
	uint64_t limit;
	uint64_t keep; /* see gf_task.keep; 0 = the whole guarantee is kept */
	/* How long an allocation of the task, finding borrowers on what of its guarantee was lent,
	 * waits quietly for them to end before they must give it back, once in a process's life
	 * (charge.c); 0 = they give it back at once. Only with keep below cap: nothing else is lent. */
	uint64_t grace_ns;
	/* Staged: the guarantee the task is promised (see gf_task.stage), above cap; 0 = none. */
	uint64_t stage;
	uint64_t seen; /* see gf_task.seen */
	int unheeded;  /* see gf_task.unheeded */
	int sealed;    /* see gf_task.sealed */
	uint64_t unseen; /* see gf_task.unseen */
};

/* The enforcer's handle on one GPU: the control copy it writes, and a descriptor of each placed
 * task's accounting file (the slot's, by the control copy's index), never a mapping of it: a task
 * may truncate its own file, and a mapping would fault (taskfile.c). */
struct gf_gpu {
	int cfd;
	int lfd; /* "<dir>-enforcer/<uuid>.lock", whose lock is this enforcer's claim on the GPU */
	struct gf_control *c;
	char dir[4096]; /* the fence directory: accounting files are "<dir>/<hash>/<uuid>.fence" */
	char uuid[GF_UUID_MAX];
	/* fd and lfd (read-only: the enforcer only asks who holds a byte) -1 where the slot has no
	 * files open; t always NULL */
	struct gf_map tasks[GF_TASKS];
	struct gf_table *scratch;      /* two tables' room for reading the files (taskfile.c) */
	int *shared;                   /* a page shared with the child that writes a file */
	int file_errno;                /* why gf_set_tasks last returned GF_SET_NOFILE */
};

/* A GPU is named by "<dir>/<uuid>.fence" in the calls below: its control copy is that name in
 * "<dir>-caps", a task's accounting file that name in "<dir>/<hex of its token's hash>", and its
 * lock file "<uuid>.<inode of that file>.live" in "<dir>-live/<hex of its token's hash>". */

/* gf_create takes the GPU for the enforcer, a lock on "<dir>-enforcer/<uuid>.lock" (created 0600
 * in a 0700 directory; a second enforcer on the same GPU is refused, GF_ERR_BUSY), and opens
 * (creating it if needed, mode 0644) its control copy. A copy of another layout is
 * GF_ERR_CORRUPT; one an enforcer died writing is made whole. */
int gf_create(const char *path, const char *uuid, uint64_t total, uint64_t budget, struct gf_gpu *g,
	      char *err, size_t errlen);
void gf_close(struct gf_gpu *g);
/* gf_attach maps the accounting file of token's task on the GPU at path for a task process, opens
 * its lock file, and claims a process slot. GF_ERR_NOTASK: the control copy places no task with
 * token. */
int gf_attach(const char *path, const char *token, struct gf_map *m, char *err, size_t errlen);
void gf_detach(struct gf_map *m);
/* gf_unmap closes everything m holds without giving its slot back (a forked child's copy of its
 * parent's map, a task's file the enforcer lets go). */
void gf_unmap(struct gf_map *m);
/* gf_private makes a table of this process alone, with one task of cap bytes, and attaches to
 * it: a process the fence cannot place in any task is fenced by it to a small allowance. */
int gf_private(const char *uuid, uint64_t cap, struct gf_map *m, char *err, size_t errlen);

/* gf_charge takes n bytes for the task, or refuses. Past its guarantee a task borrows memory that
 * no armed guarantee covers; when that is not free it waits (up to the control copy's wait_ns)
 * while waiting can help: some other task that is not waiting itself holds memory that will
 * come free. Within its guarantee a task always gets its bytes, but where borrowers took them
 * while it was unarmed it waits (GF_WAIT_OWED) until they give them back: meanwhile every
 * borrowing allocation on the GPU is refused, and the enforcer stops borrowers that hold on.
 * Before it refuses it gives back, once, the slots of its file's dead processes (an exited
 * process stays charged until reaped: the driver frees its memory only in its teardown). */
int gf_charge(struct gf_map *m, uint64_t n);
void gf_uncharge(struct gf_map *m, uint64_t n);
/* gf_wait_note, where the program defines it (the preload library does: a line in the task's
 * log; the Go package does not), is told once, outside the lock, that an allocation of n bytes
 * has waited waited_ns for memory, so a job blocked for minutes does not look hung. */
void gf_wait_note(struct gf_map *m, uint64_t n, uint64_t waited_ns);
/* gf_view is the task's cap and what its processes hold. */
int gf_view(struct gf_map *m, uint64_t *cap, uint64_t *used);
/* gf_reap gives back the slots of dead processes in m's file (of one task slot, or all with -1). */
int gf_reap(struct gf_map *m, int task);

/* Enforcer side. gf_set_tasks makes specs the GPU's tasks and returns how many it placed, or
 * GF_SET_FULL, or GF_SET_NOFILE when a task's files could not be made (a full or read-only disk:
 * g->file_errno), or GF_SET_NOROOM when a new guarantee (or a raised one) would cover memory that
 * borrowers hold or a waiting allocation awaits: that task is left out, and the caller takes its
 * reservation back. A task placed anew gets a fresh accounting file and lock file. */
int gf_set_tasks(struct gf_gpu *g, const struct gf_task_spec *specs, int n, uint64_t budget, uint64_t wait_ns,
		 uint64_t ctx, uint64_t spare);
/* gf_rebuild rebuilds each task's sums from its processes' under its lock, in a child process
 * (taskfile.c): 0, or -1 when a task's lock could not be had or its file faulted (that task is
 * left for the next time). */
int gf_rebuild(struct gf_gpu *g);
/* gf_snapshot merges the control copy and every task's file, each read with pread until a copy
 * is settled (its lock free and the same twice) for GF_ENFORCER_WAIT_NS and as it is past that,
 * into one table: the tasks' slots as the control copy places them, each task's processes (those
 * of its own slot only) in the process slots. 0, or -1 when the control copy could not be read
 * whole. */
int gf_snapshot(struct gf_gpu *g, struct gf_table *out);
/* gf_reap_all gives back the slots of dead processes in every task's file (where one has any,
 * in a child process: taskfile.c). */
int gf_reap_all(struct gf_gpu *g);

#endif
