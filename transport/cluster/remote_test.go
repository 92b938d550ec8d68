package cluster

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/iac-code/iac-code/transport/cluster/clusterpb"
)

// The pod-to-pod endpoint as a pod serves it (remote with the cluster's
// authentication), driven by a raw gRPC client speaking protoactor's
// remoting protocol: what a pod without the secret, or a pod of another
// version, would send.
var _ = Describe("the pod-to-pod endpoint", func() {
	var (
		addr    string
		refused atomic.Int64
		got     chan *clusterpb.Ready
		a       *auth
	)
	BeforeEach(func() {
		refused.Store(0)
		got = make(chan *clusterpb.Ready, 4)
		a = newAuth("s3cret", zerolog.New(GinkgoWriter), func() { refused.Add(1) })
		sys := actor.NewActorSystem()
		r := remote.NewRemote(sys, remote.Configure("127.0.0.1", 0,
			remote.WithServerOptions(a.serverOptions()...), remote.WithDialOptions(a.dialOptions()...)))
		Expect(startRemote(r)).To(Succeed())
		DeferCleanup(func() { r.Shutdown(false) })
		_, err := sys.Root.SpawnNamed(actor.PropsFromFunc(func(ctx actor.Context) {
			if m, ok := ctx.Message().(*clusterpb.Ready); ok {
				got <- m
			}
		}), "probe")
		Expect(err).NotTo(HaveOccurred())
		addr = sys.Address()
	})

	// connect opens the remoting stream with the given dial options and
	// does the handshake; it returns the stream and the handshake error.
	connect := func(opts ...grpc.DialOption) (remote.Remoting_ReceiveClient, error) {
		conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(conn.Close)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		DeferCleanup(cancel)
		stream, err := remote.NewRemotingClient(conn).Receive(ctx)
		if err != nil {
			return nil, err
		}
		_ = stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectRequest{ConnectRequest: &remote.ConnectRequest{
			ConnectionType: &remote.ConnectRequest_ServerConnection{ServerConnection: &remote.ServerConnection{MemberId: "test", Address: "127.0.0.1:1"}}}}})
		_, err = stream.Recv()
		return stream, err
	}
	batch := func(typeName string, data []byte) *remote.RemoteMessage {
		return &remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: &remote.MessageBatch{
			TypeNames: []string{typeName}, Targets: []string{"probe"},
			Envelopes: []*remote.MessageEnvelope{{TypeId: 0, Target: 0, MessageData: data}}}}}
	}

	It("refuses a client without the cluster secret, or with another one", func() {
		_, err := connect()
		Expect(status.Code(err)).To(Equal(codes.Unauthenticated))
		other := newAuth("other", zerolog.Nop(), func() {})
		_, err = connect(other.dialOptions()[1:]...)
		Expect(status.Code(err)).To(Equal(codes.Unauthenticated))
		Expect(refused.Load()).To(Equal(int64(2)))
		_, err = connect(a.dialOptions()[1:]...)
		Expect(err).NotTo(HaveOccurred())
		Expect(refused.Load()).To(Equal(int64(2)))
	})

	It("survives a message type it does not know (a newer pod's) and serves the next stream", func() {
		stream, err := connect(a.dialOptions()[1:]...)
		Expect(err).NotTo(HaveOccurred())
		Expect(stream.Send(batch("iaccode.cluster.v9.FromTheFuture", []byte{1, 2, 3}))).To(Succeed())
		_, err = stream.Recv() // the endpoint drops that stream, not the process
		Expect(err).To(HaveOccurred())

		stream, err = connect(a.dialOptions()[1:]...)
		Expect(err).NotTo(HaveOccurred())
		data, err := proto.Marshal(&clusterpb.Ready{})
		Expect(err).NotTo(HaveOccurred())
		Expect(stream.Send(batch(string(proto.MessageName(&clusterpb.Ready{})), data))).To(Succeed())
		Eventually(got, 5*time.Second).Should(Receive())
	})
})
