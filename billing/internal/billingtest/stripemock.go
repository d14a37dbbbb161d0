package billingtest

import (
	"fmt"
	"go/build"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/routebalance/routebalance/internal/testenv"
)

// StripeMock starts stripe-mock on a free loopback port for the test and
// returns its base URL. Without the binary the test is skipped with a
// "needs stripe-mock: …" reason, or fails when CI is set (.ci/run installs
// it; see internal/testenv).
func StripeMock(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("stripe-mock")
	if err != nil {
		bin = filepath.Join(build.Default.GOPATH, "bin", "stripe-mock")
		if _, statErr := os.Stat(bin); statErr != nil {
			testenv.Need(t, "stripe-mock", "not installed (go install github.com/stripe/stripe-mock@v0.203.0)")
		}
	}
	httpPort, httpsPort := freePort(t), freePort(t)
	cmd := exec.Command(bin, "-http-addr", "127.0.0.1:"+httpPort, "-https-addr", "127.0.0.1:"+httpsPort)
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		t.Fatalf("start stripe-mock: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := "127.0.0.1:" + httpPort
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stripe-mock did not listen on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "http://" + addr
}

func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
}

// DeadURL returns an http URL on a loopback port nothing listens on.
func DeadURL(t testing.TB) string {
	t.Helper()
	return "http://127.0.0.1:" + freePort(t)
}
