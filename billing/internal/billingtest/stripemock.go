package billingtest

import (
	"bufio"
	"go/build"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/routebalance/routebalance/internal/syncbuf"
	"github.com/routebalance/routebalance/internal/testenv"
)

// stripeMockStart bounds how long stripe-mock may take to load its
// OpenAPI spec and listen: about a second on an idle machine, far more on
// a loaded 2-core one. A guard against a hang, never a timing assertion.
const stripeMockStart = 2 * time.Minute

// stripeMockListening starts the line stripe-mock prints once its HTTP
// listener is bound (after the spec is loaded).
const stripeMockListening = "Listening for HTTP at address: "

// StripeMock starts stripe-mock on a loopback port the kernel picks and
// returns its base URL once it listens. Without the binary the test is
// skipped with a "needs stripe-mock: …" reason, or fails when CI is set
// (.ci/run installs it; see internal/testenv).
//
// The port comes from stripe-mock's own listener (-http-addr
// 127.0.0.1:0), read back from its "Listening for HTTP at address" line:
// no port is picked here and released for stripe-mock to bind later,
// which another process could take meanwhile.
func StripeMock(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("stripe-mock")
	if err != nil {
		bin = filepath.Join(build.Default.GOPATH, "bin", "stripe-mock")
		if _, statErr := os.Stat(bin); statErr != nil {
			testenv.Need(t, "stripe-mock", "not installed (go install github.com/stripe/stripe-mock@v0.203.0)")
		}
	}
	cmd := exec.Command(bin, "-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start stripe-mock: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), stripeMockListening); ok {
				addr <- strings.TrimSpace(a)
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout) // it logs every request
	}()
	select {
	case a := <-addr:
		return "http://" + a
	case err := <-exited:
		exited <- err // for the cleanup
		t.Fatalf("stripe-mock exited before listening: %v\n%s", err, stderr.String())
	case <-time.After(stripeMockStart):
		t.Fatalf("stripe-mock did not listen within %v\n%s", stripeMockStart, stderr.String())
	}
	return ""
}

// lockedBuffer is a buffer safe for concurrent writers and readers.
type lockedBuffer = syncbuf.Buffer

// DeadURL returns an http URL on a loopback port nothing listens on, and
// nothing can: the port stays bound (never listening) to a socket held
// until the test ends, so a connection is refused at once instead of
// reaching whatever process took a released port.
func DeadURL(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("dead url: socket: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("dead url: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("dead url: getsockname: %v", err)
	}
	return "http://127.0.0.1:" + strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)
}
