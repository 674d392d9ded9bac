// Package fencetest builds the fence library, a fake libcuda.so.1 and a small CUDA program with
// the system C compiler, so tests run the real fence in real processes without a GPU.
package fencetest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/taskenv"
)

// FakeUUIDHex names the fake driver's first device; FakeUUID is how NVML and the ledger spell it.
const (
	FakeUUIDHex = "00112233445566778899aabbccddeeff"
	FakeUUID    = "GPU-00112233-4455-6677-8899-aabbccddeeff"
)

// Kit is what Build made.
type Kit struct {
	// Library is the fence as shipped; TestLibrary adds the hooks tests use to stop a
	// process at chosen points (-DGF_TESTING).
	Library, TestLibrary string
	// DriverDir holds the fake libcuda.so.1 (for LD_LIBRARY_PATH).
	DriverDir string
	// Client is the CUDA program (testdata/client.c).
	Client string
	// Tool drives a table through state.h's API with the test hooks (testdata/tablectl.c).
	Tool string
}

// Sources is the directory of the fence package's C sources.
func Sources() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

var (
	once     sync.Once
	shared   Kit
	buildErr error
	noCC     bool
	tempDir  string
)

// Build compiles everything, warnings as errors, once per test binary (call Main from
// TestMain to remove it afterwards). Without a C compiler it skips, except in CI, where the
// fence must be tested.
func Build(t testing.TB) Kit {
	t.Helper()
	once.Do(build)
	switch {
	case noCC && os.Getenv("CI") != "":
		t.Fatalf("no C compiler in CI: the fence cannot be tested: %v", buildErr)
	case noCC:
		t.Skipf("no C compiler: %v", buildErr)
	case buildErr != nil:
		t.Fatal(buildErr)
	}
	return shared
}

// Main runs the tests and removes what Build made.
func Main(m *testing.M) {
	code := m.Run()
	if tempDir != "" {
		os.RemoveAll(tempDir)
	}
	os.Exit(code)
}

func build() {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		noCC, buildErr = true, err
		return
	}
	dir, err := os.MkdirTemp("", "gpufrac-fencetest-")
	if err != nil {
		buildErr = err
		return
	}
	tempDir = dir
	src := Sources()
	k := Kit{
		Library:     filepath.Join(dir, "libgpufrac-fence.so"),
		TestLibrary: filepath.Join(dir, "libgpufrac-fence-testing.so"),
		DriverDir:   filepath.Join(dir, "driver"),
		Client:      filepath.Join(dir, "client"),
		Tool:        filepath.Join(dir, "tablectl"),
	}
	if buildErr = os.Mkdir(k.DriverDir, 0o755); buildErr != nil {
		return
	}
	warn := []string{"-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror"}
	// Every C file of lib/ and of the package's directory is the library's, as the
	// GNUmakefile's FENCE_SRC says.
	libSrc, err := filepath.Glob(filepath.Join(src, "lib", "*.c"))
	tableSrc, err2 := filepath.Glob(filepath.Join(src, "*.c"))
	if err != nil || err2 != nil || len(libSrc) == 0 || len(tableSrc) == 0 {
		buildErr = fmt.Errorf("no C sources in %s: %v", src, errors.Join(err, err2))
		return
	}
	lib := append(append([]string{"-fPIC", "-shared", "-fvisibility=hidden", "-include", filepath.Join(src, "lib", "compat.h")}, libSrc...), tableSrc...)
	lib = append(append(lib, runtimeLibs(cc)...), "-ldl", "-lpthread")
	steps := [][]string{
		append(append(append([]string{}, warn...), "-o", k.Library), lib...),
		append(append(append([]string{}, warn...), "-DGF_TESTING", "-o", k.TestLibrary), lib...),
		append(append([]string{}, warn...), "-fPIC", "-shared", "-o", filepath.Join(k.DriverDir, "libcuda.so.1"), filepath.Join(src, "testdata", "fakecuda.c"), "-lpthread"),
		append(append([]string{}, warn...), "-o", k.Client, filepath.Join(src, "testdata", "client.c"), "-ldl", "-lpthread"),
		append(append(append([]string{}, warn...), "-DGF_TESTING", "-o", k.Tool, filepath.Join(src, "testdata", "tablectl.c")), tableSrc...),
	}
	for _, args := range steps {
		if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("%s %s: %w\n%s", cc, strings.Join(args, " "), err, out)
			return
		}
	}
	shared = k
}

// runtimeLibs names libdl and libpthread by their runtime files where the compiler finds them,
// as the GNUmakefile's FENCE_LIBS does: glibc before 2.34 keeps dlopen and pthread_once there.
func runtimeLibs(cc string) []string {
	var out []string
	for _, l := range []string{"libdl.so.2", "libpthread.so.0"} {
		p, err := exec.Command(cc, "-print-file-name="+l).Output()
		if err == nil && strings.Contains(string(p), "/") {
			out = append(out, "-Wl,--no-as-needed", "-l:"+l)
		}
	}
	return out
}

// Env is the environment of a fenced client process of token's task on the fake GPU.
func (k Kit) Env(fenceDir, token string, extra ...string) []string {
	env := []string{
		taskenv.Preload + "=" + k.Library,
		"LD_LIBRARY_PATH=" + k.DriverDir,
		"FAKE_CUDA_UUIDS=" + FakeUUIDHex,
		taskenv.FenceDir + "=" + fenceDir,
		taskenv.GPUUUID + "=" + FakeUUID,
		"PATH=" + os.Getenv("PATH"),
	}
	if token != "" {
		env = append(env, taskenv.Reservation+"="+token)
	}
	return append(env, extra...)
}

// Proc is a running client that answers one line per command.
type Proc struct {
	t      testing.TB
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan string
	mu     sync.Mutex
	stderr bytes.Buffer
	errs   chan string
	done   chan struct{}
}

// Start runs the client with env (see Env); args "direct" makes it call the driver's symbol
// names instead of going through cuGetProcAddress.
func (k Kit) Start(t testing.TB, env []string, args ...string) *Proc {
	t.Helper()
	return start(t, k.Client, env, args)
}

// StartTool runs the table tool (see Kit.Tool) with env; GF_TEST_STALL=<point> in it stops the
// tool inside that critical section.
func (k Kit) StartTool(t testing.TB, env ...string) *Proc {
	t.Helper()
	return start(t, k.Tool, env, nil)
}

// StartToolMounted runs the table tool as a task in a container sees the host: in a mount
// namespace of its own (unshare; a user namespace makes the caller root there, as a tenant is in
// its container), where the directory that holds every path in ro and rw is replaced by an empty
// one (a tmpfs) in which only those paths appear, parents first, each in ro read-only and each in
// rw writable (a writable directory inside a read-only one stays writable, as Docker layers a
// task's mounts). What the task is not given it cannot find, as in a container. It skips where
// the kernel lends no user namespaces.
func (k Kit) StartToolMounted(t testing.TB, ro, rw []string, env ...string) *Proc {
	t.Helper()
	if out, err := exec.Command("unshare", "-rm", "true").CombinedOutput(); err != nil {
		t.Skipf("no user and mount namespaces here (unshare -rm: %v %s): the mounts cannot be tried", err, out)
	}
	readOnly := map[string]bool{}
	var paths []string
	for _, p := range ro {
		readOnly[filepath.Clean(p)] = true
		paths = append(paths, filepath.Clean(p))
	}
	for _, p := range rw {
		paths = append(paths, filepath.Clean(p))
	}
	if len(paths) == 0 {
		t.Fatal("StartToolMounted: no paths to give the task")
	}
	top := filepath.Dir(paths[0])
	for _, p := range paths[1:] {
		top = commonDir(top, filepath.Dir(p))
	}
	if top == "/" || inside(k.Tool, top) {
		t.Fatalf("StartToolMounted: the paths %v share only %s, which the task cannot be shown empty", paths, top)
	}
	// Parents first: a path's depth is its count of separators.
	slices.SortStableFunc(paths, func(a, b string) int { return strings.Count(a, "/") - strings.Count(b, "/") })
	var script strings.Builder
	// Descriptor 3 keeps the directory reachable once the tmpfs hides it; mount -c takes the
	// path through it as it is, instead of resolving it to the hidden name.
	fmt.Fprintf(&script, "exec 3< '%s' || exit 1\nmount -t tmpfs tmpfs '%s' || exit 1\n", top, top)
	for _, p := range paths {
		rel, _ := filepath.Rel(top, p)
		fmt.Fprintf(&script, "mkdir -p '%s' && mount -c --bind '/proc/self/fd/3/%s' '%s' || exit 1\n", p, rel, p)
		if readOnly[p] {
			fmt.Fprintf(&script, "mount -o remount,bind,ro '%s' || exit 1\n", p)
		}
	}
	fmt.Fprintf(&script, "exec 3<&-\nexec '%s'\n", k.Tool)
	if len(env) > 0 {
		env = append(env, "PATH="+os.Getenv("PATH"))
	}
	return start(t, "unshare", env, []string{"-rm", "sh", "-c", script.String()})
}

// commonDir is the deepest directory that holds both a and b (clean, absolute).
func commonDir(a, b string) string {
	for !inside(b, a) {
		a = filepath.Dir(a)
	}
	return a
}

// inside says whether path is dir or lies under it.
func inside(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

func start(t testing.TB, bin string, env, args []string) *Proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errp, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{t: t, cmd: cmd, in: in, lines: make(chan string, 16), errs: make(chan string, 64), done: make(chan struct{})}
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			p.lines <- s.Text()
		}
		close(p.lines)
	}()
	go func() {
		defer close(p.done)
		s := bufio.NewScanner(errp)
		for s.Scan() {
			p.mu.Lock()
			p.stderr.WriteString(s.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.errs <- s.Text():
			default:
			}
		}
	}()
	t.Cleanup(func() { p.Kill() })
	return p
}

// replyWait bounds how long a command may take: a guard against a hung test, not a timing.
const replyWait = 30 * time.Second

// Do sends one command and returns its answer.
func (p *Proc) Do(cmd string) string {
	p.t.Helper()
	if _, err := fmt.Fprintln(p.in, cmd); err != nil {
		p.t.Fatalf("client: send %q: %v (stderr: %s)", cmd, err, p.Stderr())
	}
	return p.reply(cmd, replyWait)
}

// DoWithin is Do with a tighter bound: what must answer soon, such as an attach to a table
// whose last lock holder died, fails the test in d instead of hanging it.
func (p *Proc) DoWithin(cmd string, d time.Duration) string {
	p.t.Helper()
	if _, err := fmt.Fprintln(p.in, cmd); err != nil {
		p.t.Fatalf("client: send %q: %v (stderr: %s)", cmd, err, p.Stderr())
	}
	return p.reply(cmd, d)
}

// Reply is the answer to the command Send sent last.
func (p *Proc) Reply() string {
	p.t.Helper()
	return p.reply("the last command sent", replyWait)
}

func (p *Proc) reply(cmd string, wait time.Duration) string {
	p.t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("client exited before answering %q (stderr: %s)", cmd, p.Stderr())
		}
		return l
	case <-time.After(wait):
		p.t.Fatalf("client did not answer %q within %s (stderr: %s)", cmd, wait, p.Stderr())
	}
	return ""
}

// Answered is the answer to the command Send sent last, if it has come: false while the
// command still blocks.
func (p *Proc) Answered() (string, bool) {
	select {
	case l, ok := <-p.lines:
		return l, ok
	default:
		return "", false
	}
}

// Send writes a command without waiting for an answer (for one that blocks).
func (p *Proc) Send(cmd string) {
	p.t.Helper()
	if _, err := fmt.Fprintln(p.in, cmd); err != nil {
		p.t.Fatalf("client: send %q: %v", cmd, err)
	}
}

// WaitStderr waits for a stderr line containing s.
func (p *Proc) WaitStderr(s string) {
	p.t.Helper()
	deadline := time.After(replyWait)
	for {
		if strings.Contains(p.Stderr(), s) {
			return
		}
		select {
		case <-p.errs:
		case <-p.done:
			if !strings.Contains(p.Stderr(), s) {
				p.t.Fatalf("client ended without printing %q (stderr: %s)", s, p.Stderr())
			}
			return
		case <-deadline:
			p.t.Fatalf("client never printed %q (stderr: %s)", s, p.Stderr())
		}
	}
}

// Stderr is what the client printed there so far.
func (p *Proc) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// Exit asks the client to leave without freeing anything and waits for it.
func (p *Proc) Exit() {
	p.t.Helper()
	p.Send("exit")
	p.Wait()
}

// PID is the process's id, for a test that signals it (SIGSTOP: a process alive but stuck).
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Kill sends SIGKILL and waits until the process is gone.
func (p *Proc) Kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Kill()
		p.Wait()
	}
}

// Wait waits for the process to end and its output to drain.
func (p *Proc) Wait() {
	<-p.done
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Wait()
	}
}
