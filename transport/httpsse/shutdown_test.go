package httpsse_test

import (
	"context"
	"net"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/transport/httpsse"
)

var _ = Describe("a Shutdown meeting a Serve that is only starting", func() {
	// served runs edge.Serve(ln) in the background; its result arrives on
	// the channel.
	served := func(edge *httpsse.Edge, ln net.Listener) chan error {
		ch := make(chan error, 1)
		go func() { ch <- edge.Serve(ln) }()
		return ch
	}
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		Expect(err).NotTo(HaveOccurred())
		return ln
	}
	refused := func(addr string) bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err != nil
	}

	It("Serve after Shutdown returns nil at once and closes its listener", func() {
		base := startEnv(httpsse.Config{})
		edge := httpsse.New(base.srv, httpsse.Config{}, zerolog.New(GinkgoWriter))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		Expect(edge.Shutdown(ctx)).To(Succeed())
		ln := listen()
		done := served(edge, ln)
		var err error
		if !Eventually(done, time.Second).Should(Receive(&err)) {
			_ = edge.Shutdown(context.Background()) // the old code's Serve accepts on: end it
			Eventually(done).Should(Receive())
			return
		}
		Expect(err).NotTo(HaveOccurred())
		Expect(refused(ln.Addr().String())).To(BeTrue(), "no listener is left behind")
	})

	It("Shutdown right as Serve starts ends it: Serve returns at once and leaves no listener open", func() {
		base := startEnv(httpsse.Config{})
		log := zerolog.New(GinkgoWriter)
		const rounds = 100
		stuck := 0
		for i := range rounds {
			ln := listen()
			edge := httpsse.New(base.srv, httpsse.Config{}, log)
			done := served(edge, ln)
			// Vary who goes first: Serve handing its listener to fasthttp,
			// or Shutdown.
			for range i % 4 * 100 {
				_ = time.Now()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			Expect(edge.Shutdown(ctx)).To(Succeed())
			cancel()
			select {
			case err := <-done:
				Expect(err).NotTo(HaveOccurred())
			case <-time.After(2 * time.Second):
				stuck++
				_ = edge.Shutdown(context.Background()) // the old code's Serve accepts on: end it
				Eventually(done).Should(Receive())
				continue
			}
			Expect(refused(ln.Addr().String())).To(BeTrue(), "round %d: no listener is left behind", i)
		}
		Expect(stuck).To(BeZero(), "Serve still accepting after Shutdown in %d of %d rounds", stuck, rounds)
	})

	It("a pod stopped as it starts (context cancelled at once) stops: Serve returns", func() {
		base := startEnv(httpsse.Config{})
		log := zerolog.New(GinkgoWriter)
		for i := range 30 {
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- httpsse.Serve(ctx, base.srv, httpsse.Config{Port: 0}, log) }()
			for range i % 3 * 100 {
				_ = time.Now()
			}
			cancel()
			// On the old code a lost round hangs for good: nothing can end it.
			Eventually(done, 5*time.Second).Should(Receive(BeNil()), "round %d", i)
		}
	})
})
