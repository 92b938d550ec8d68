package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
)

// The standard-library relay is http-fanout's yardstick: the least a
// server must do to carry the same workload over the same wire (initialize,
// an SSE stream per connection, session/new and session/prompt as POSTs
// answered 202, the model's stream read over HTTP, each text delta sent as
// an agent_message_chunk event with an id, the prompt's answer), written
// the plain way with net/http and encoding/json: one goroutine per stream
// waiting on a channel, a goroutine per turn, every event marshalled for
// its one connection. No history, no replay, no sessions on disk, no
// actors. http-fanout runs it beside the server (--baseline, on by
// default) and reports the server's figures as multiples of its own.

// startRelay starts this executable as the relay on a free port, with the
// same environment (the fake model's URL) as the server.
func startRelay(ctx context.Context, o *Options, fakeURL string) (*Server, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ro := *o
	ro.Bin, ro.Valgrind, ro.Debug = self, false, false
	return startServer(ctx, &ro, "http", fakeURL, []string{childEnv + "=http-relay"})
}

// relayMain serves the relay on the --host/--port of the server's
// command line until killed.
func relayMain() error {
	fs := flag.NewFlagSet("http-relay", flag.ContinueOnError)
	host := fs.String("host", "127.0.0.1", "")
	port := fs.Int("port", 0, "")
	fs.String("transport", "http", "")
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "acp" {
		args = args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	r := &relay{model: os.Getenv("IAC_CODE_BASE_URL") + "/chat/completions", conns: map[string]*relayConn{},
		hc: &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4096, DisableCompression: true}}}
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("/acp", r.serve)
	return http.ListenAndServe(*host+":"+strconv.Itoa(*port), mux)
}

type relay struct {
	model string
	hc    *http.Client
	next  atomic.Int64
	mu    sync.Mutex
	conns map[string]*relayConn
}

// relayConn is one ACP connection: its stream's events, in order.
type relayConn struct {
	events chan []byte
	nextID atomic.Uint64
	done   chan struct{}
	once   sync.Once
}

func (c *relayConn) send(msg any) {
	b, err := json.Marshal(msg)
	if err != nil {
		return
	}
	select {
	case c.events <- b:
	case <-c.done:
	}
}

type rpcMsg struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
}

type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result"`
}

func (r *relay) conn(req *http.Request) *relayConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conns[req.Header.Get("Acp-Connection-Id")]
}

func (r *relay) serve(w http.ResponseWriter, req *http.Request) {
	switch req.Method {
	case http.MethodGet:
		r.stream(w, req)
	case http.MethodDelete:
		r.mu.Lock()
		c := r.conns[req.Header.Get("Acp-Connection-Id")]
		delete(r.conns, req.Header.Get("Acp-Connection-Id"))
		r.mu.Unlock()
		if c != nil {
			c.once.Do(func() { close(c.done) })
		}
		w.WriteHeader(http.StatusOK)
	case http.MethodPost:
		var m rpcMsg
		if err := json.NewDecoder(req.Body).Decode(&m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if m.Method == "initialize" {
			id := "c" + strconv.FormatInt(r.next.Add(1), 10)
			c := &relayConn{events: make(chan []byte, 256), done: make(chan struct{})}
			r.mu.Lock()
			r.conns[id] = c
			r.mu.Unlock()
			w.Header().Set("Acp-Connection-Id", id)
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(rpcResponse{"2.0", m.ID, map[string]any{"protocolVersion": 1, "agentCapabilities": map[string]any{}}})
			return
		}
		c := r.conn(req)
		if c == nil {
			http.Error(w, "unknown connection", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		switch m.Method {
		case "session/new":
			c.send(rpcResponse{"2.0", m.ID, map[string]string{"sessionId": "s" + strconv.FormatInt(r.next.Add(1), 10)}})
		case "session/prompt":
			var p struct {
				SessionID string `json:"sessionId"`
			}
			_ = json.Unmarshal(m.Params, &p)
			go r.turn(c, m.ID, p.SessionID)
		default:
			c.send(rpcResponse{"2.0", m.ID, map[string]any{}})
		}
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

// stream writes the connection's events as SSE until it ends.
func (r *relay) stream(w http.ResponseWriter, req *http.Request) {
	c := r.conn(req)
	if c == nil {
		http.Error(w, "unknown connection", http.StatusBadRequest)
		return
	}
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if fl != nil {
		fl.Flush()
	}
	for {
		select {
		case b := <-c.events:
			fmt.Fprintf(w, "id: %d\ndata: %s\n\n", c.nextID.Add(1), b)
			if fl != nil && len(c.events) == 0 {
				fl.Flush()
			}
		case <-c.done:
			return
		case <-req.Context().Done():
			return
		}
	}
}

type relayUpdate struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  struct {
		SessionID string `json:"sessionId"`
		Update    struct {
			SessionUpdate string `json:"sessionUpdate"`
			Content       struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		} `json:"update"`
	} `json:"params"`
}

// turn streams the model's answer to the connection, then answers the
// prompt.
func (r *relay) turn(c *relayConn, id json.RawMessage, sid string) {
	stop := "end_turn"
	if err := r.model1(c, sid); err != nil {
		fmt.Fprintln(os.Stderr, "http-relay:", err)
		stop = "refusal"
	}
	c.send(rpcResponse{"2.0", id, map[string]string{"stopReason": stop}})
}

func (r *relay) model1(c *relayConn, sid string) error {
	body := `{"model":"acp-bench","stream":true,"messages":[{"role":"user","content":"stream"}]}`
	req, err := http.NewRequest(http.MethodPost, r.model, bytes.NewReader([]byte(body)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer acp-bench")
	resp, err := r.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("model: HTTP %d %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok {
			continue
		}
		if bytes.Equal(line, []byte("[DONE]")) {
			return nil
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(line, &chunk); err != nil {
			return err
		}
		if len(chunk.Choices) == 0 || chunk.Choices[0].Delta.Content == "" {
			continue
		}
		var u relayUpdate
		u.JSONRPC, u.Method = "2.0", "session/update"
		u.Params.SessionID = sid
		u.Params.Update.SessionUpdate = "agent_message_chunk"
		u.Params.Update.Content.Type = "text"
		u.Params.Update.Content.Text = chunk.Choices[0].Delta.Content
		c.send(&u)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errors.New("model stream ended without [DONE]")
}
