package pgtest_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/store/pgtest"
)

func TestPGTest(t *testing.T) {
	if os.Getenv("PGTEST_CHILD") == "1" {
		child()
		return
	}
	RegisterFailHandler(Fail)
	RunSpecs(t, "pgtest Suite")
}

// child starts a server, says where it is and waits to be killed.
func child() {
	srv, err := pgtest.Start(pgtest.Options{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("url", srv.URL("postgres"))
	time.Sleep(time.Minute)
}

var _ = Describe("Server", func() {
	BeforeEach(func() {
		if !pgtest.Available() {
			fmt.Fprintln(os.Stderr, pgtest.SkipMessage)
			Skip(pgtest.SkipMessage)
		}
	})

	It("serves databases and schemas on loopback with a password, and leaves nothing behind when stopped", func() {
		srv, err := pgtest.Start(pgtest.Options{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(srv.Stop)
		ctx := context.Background()
		name, u, err := srv.NewSchema()
		Expect(err).NotTo(HaveOccurred())
		conn, err := pgx.Connect(ctx, u)
		Expect(err).NotTo(HaveOccurred())
		_, err = conn.Exec(ctx, "CREATE TABLE t (x int)")
		Expect(err).NotTo(HaveOccurred())
		var schema string
		Expect(conn.QueryRow(ctx, "SELECT table_schema FROM information_schema.tables WHERE table_name = 't'").Scan(&schema)).To(Succeed())
		Expect(schema).To(Equal(name))
		Expect(conn.Close(ctx)).To(Succeed())
		Expect(srv.DropSchema(name)).To(Succeed())

		_, err = pgx.Connect(ctx, strings.Replace(srv.URL("postgres"), srv.Password(), "wrong", 1))
		Expect(err).To(MatchError(ContainSubstring("password authentication failed")))

		db, u, err := srv.NewDatabase()
		Expect(err).NotTo(HaveOccurred())
		conn, err = pgx.Connect(ctx, u)
		Expect(err).NotTo(HaveOccurred())
		Expect(conn.Close(ctx)).To(Succeed())
		Expect(srv.DropDatabase(db)).To(Succeed())

		Expect(srv.Stop()).To(Succeed())
		_, err = net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", srv.Port()))
		Expect(err).To(HaveOccurred())
	})

	It("stops the server when the test process is killed", func() {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestPGTest$")
		cmd.Env = append(os.Environ(), "PGTEST_CHILD=1")
		out, err := cmd.StdoutPipe()
		Expect(err).NotTo(HaveOccurred())
		cmd.Stderr = GinkgoWriter
		Expect(cmd.Start()).To(Succeed())
		DeferCleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		line, err := bufio.NewReader(out).ReadString('\n')
		Expect(err).NotTo(HaveOccurred())
		u, ok := strings.CutPrefix(strings.TrimSpace(line), "url ")
		Expect(ok).To(BeTrue(), line)
		conn, err := pgx.Connect(context.Background(), u)
		Expect(err).NotTo(HaveOccurred())
		var dir string
		Expect(conn.QueryRow(context.Background(), "SHOW data_directory").Scan(&dir)).To(Succeed())
		_ = conn.Close(context.Background())

		Expect(cmd.Process.Signal(syscall.SIGKILL)).To(Succeed())
		Eventually(func() error {
			c, err := pgx.Connect(context.Background(), u)
			if err == nil {
				_ = c.Close(context.Background())
			}
			return err
		}, 30*time.Second, 50*time.Millisecond).Should(HaveOccurred())
		Eventually(func() bool { _, err := os.Stat(dir); return os.IsNotExist(err) }, 10*time.Second, 50*time.Millisecond).
			Should(BeTrue(), "the temp dir goes with the server")
	})
})

var _ = Describe("Proxy", func() {
	It("forwards, cuts every connection, refuses new ones while cut, and heals", func() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(ln.Close)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() { defer c.Close(); _, _ = bufio.NewReader(c).WriteTo(c) }() // echo
			}
		}()
		p, err := pgtest.NewProxy(ln.Addr().String())
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(p.Close)
		echo := func(c net.Conn) error {
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Write([]byte("ping\n")); err != nil {
				return err
			}
			line, err := bufio.NewReader(c).ReadString('\n')
			if err == nil && line != "ping\n" {
				err = fmt.Errorf("got %q", line)
			}
			return err
		}
		c, err := net.Dial("tcp", p.Addr())
		Expect(err).NotTo(HaveOccurred())
		Expect(echo(c)).To(Succeed())
		p.Cut()
		Expect(echo(c)).NotTo(Succeed(), "the open connection was dropped")
		c2, err := net.Dial("tcp", p.Addr())
		Expect(err).NotTo(HaveOccurred())
		Expect(echo(c2)).NotTo(Succeed(), "new connections are closed while cut")
		p.Heal()
		c3, err := net.Dial("tcp", p.Addr())
		Expect(err).NotTo(HaveOccurred())
		Expect(echo(c3)).To(Succeed())
	})
})
