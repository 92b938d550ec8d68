package acpclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/fasthttp/websocket"
)

// WS is one ACP connection over a WebSocket on /acp: one JSON-RPC message
// per text frame each way. Pings are answered while Next reads.
type WS struct {
	// ID is the Acp-Connection-Id of the 101.
	ID  string
	c   *websocket.Conn
	buf bytes.Buffer
	// Bytes counts the payload bytes read.
	Bytes int64
}

// DialWS upgrades GET /acp on addr (host:port) to a WebSocket, with
// "Authorization: Bearer <token>" when token is set.
func DialWS(ctx context.Context, addr, token string) (*WS, error) {
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second, ReadBufferSize: 8192, WriteBufferSize: 4096}
	var hdr http.Header
	if token != "" {
		hdr = http.Header{"Authorization": {"Bearer " + token}}
	}
	c, resp, err := d.DialContext(ctx, "ws://"+addr+"/acp", hdr)
	if err != nil {
		if resp != nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			return nil, &StatusError{"GET (upgrade)", resp.StatusCode, string(b)}
		}
		return nil, fmt.Errorf("GET (upgrade): %w", err)
	}
	id := resp.Header.Get("Acp-Connection-Id")
	if resp.StatusCode != http.StatusSwitchingProtocols || id == "" {
		_ = c.Close()
		return nil, errors.New("GET (upgrade): 101 without Acp-Connection-Id")
	}
	return &WS{ID: id, c: c}, nil
}

// Send writes one message as a text frame.
func (w *WS) Send(msg []byte) error { return w.c.WriteMessage(websocket.TextMessage, msg) }

// Next returns the next text frame's payload, valid until the next call
// (binary frames are skipped).
func (w *WS) Next() ([]byte, error) {
	for {
		kind, r, err := w.c.NextReader()
		if err != nil {
			return nil, err
		}
		w.buf.Reset()
		n, err := w.buf.ReadFrom(r)
		w.Bytes += n
		if err != nil {
			return nil, err
		}
		if kind == websocket.TextMessage {
			return w.buf.Bytes(), nil
		}
	}
}

// SetReadDeadline bounds the next reads.
func (w *WS) SetReadDeadline(t time.Time) error { return w.c.SetReadDeadline(t) }

// Close sends a normal close frame and drops the connection.
func (w *WS) Close() error {
	_ = w.c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	return w.c.Close()
}
