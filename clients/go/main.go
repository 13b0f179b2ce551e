// etcd-lock-client: lockcompare's external-client protocol (docs/clients.md) over etcd's own Go
// lock, clientv3/concurrency.Mutex (etcd 3.4, Debian's golang-etcd-server-dev), as Go programs and
// Kubernetes-style leader election use it:
//
//	session := concurrency.NewSession(cli, WithTTL(ttl))   // a lease, kept alive by the client
//	m := concurrency.NewMutex(session, key)
//	m.Lock(ctx)                                            // one attempt: ctx has a deadline
//	...
//	m.Unlock(ctx); session.Close()
//
// One session per acquire, whose TTL is the lock's (whole seconds: etcd grants nothing else). The
// session's keepalive is the renewal: every keepalive reply the client's lessor delivers is an
// "events" renewal, and the session's Done() closing while the lock is held is a loss. Nothing
// here renews, retries or checks on its own: what is measured is the library.
//
// With --fenced the acquire reply carries the mutex key's create revision as the fencing token
// (strictly increasing across holders: the queue's order is the keys' create revisions).
//
// Times are CLOCK_MONOTONIC nanoseconds (the clock of Python's time.monotonic_ns()).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sort"
	"sync"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/clientv3/concurrency"
	pb "go.etcd.io/etcd/etcdserver/etcdserverpb"
	"go.etcd.io/etcd/version"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

const protocolVersion = 1

// etcdVersion is the etcd client's version, stamped by build.sh (-ldflags -X main.etcdVersion=...):
// Debian's package version of the sources it was built from (3.4.23-4: the upstream release and the
// distribution's patches), else the sources' own version.go. Unstamped: version.Version.
var etcdVersion = ""

func clientVersion() string {
	if etcdVersion != "" {
		return etcdVersion
	}
	return version.Version
}

func monotonicNs() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // Linux always has CLOCK_MONOTONIC
	}
	return ts.Nano()
}

type request struct {
	ID       json.RawMessage `json:"id"`
	Op       string          `json:"op"`
	Protocol int             `json:"protocol"`
	Nodes    []string        `json:"nodes"`
	TimeoutM int64           `json:"request_timeout_ms"`
	Key      string          `json:"key"`
	Owner    string          `json:"owner"`
	TTLMs    int64           `json:"ttl_ms"`
}

type reply map[string]interface{}

// event is one renewal (a keepalive reply) or loss (the session's Done), as "events" reports them.
type event struct {
	T0         int64   `json:"t0"`
	T1         int64   `json:"t1"`
	OK         bool    `json:"ok"`
	Owner      string  `json:"owner"`
	ValidUntil *int64  `json:"valid_until"`
	Reason     *string `json:"reason"`
}

// holding is one lock this client holds: its session, its mutex and what the library believes.
type holding struct {
	session    *concurrency.Session
	mutex      *concurrency.Mutex
	owner      string
	validUntil int64 // the lease's deadline as the library believes it (last keepalive reply + TTL)
	granted    bool  // renewals are reported only once the harness knows the owner
	lost       bool
	releasing  bool
	stopWatch  context.CancelFunc
}

type client struct {
	fenced bool

	out sync.Mutex // one reply line at a time on stdout

	mu       sync.Mutex
	nodes    []string
	timeout  time.Duration
	cli      *clientv3.Client
	holdings map[string]*holding
	events   []event
}

func main() {
	fenced := flag.Bool("fenced", false, "report the mutex key's create revision as the fencing token")
	flag.Parse()
	c := &client{fenced: *fenced, holdings: map[string]*holding{}, timeout: 2 * time.Second}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64*1024), 1<<20)
	var calls sync.WaitGroup
	for in.Scan() {
		line := in.Bytes()
		if len(line) == 0 {
			continue
		}
		var req request
		if err := json.Unmarshal(line, &req); err != nil {
			fmt.Fprintf(os.Stderr, "not a request: %v\n", err)
			continue
		}
		if req.Op == "close" {
			calls.Wait()
			c.send(req.ID, reply{"ok": true})
			return
		}
		// Each request on its own goroutine: after a late reply the harness may send the next
		// request before the late one is answered (every reply carries its request's id).
		calls.Add(1)
		go func(req request) {
			defer calls.Done()
			c.send(req.ID, c.handle(req))
		}(req)
	}
	calls.Wait()
}

func (c *client) send(id json.RawMessage, r reply) {
	r["id"] = id
	line, err := json.Marshal(r)
	if err != nil {
		line = []byte(fmt.Sprintf(`{"id":%s,"ok":false,"reason":"error","error":%q}`, id, err.Error()))
	}
	c.out.Lock()
	defer c.out.Unlock()
	os.Stdout.Write(append(line, '\n'))
}

func refusal(reason string, err error) reply {
	r := reply{"ok": false, "reason": reason}
	if err != nil {
		r["error"] = err.Error()
	}
	return r
}

func (c *client) handle(req request) reply {
	switch req.Op {
	case "hello":
		return c.hello(req)
	case "acquire":
		return c.acquire(req)
	case "release":
		return c.release(req)
	case "check":
		return c.check(req)
	case "extend":
		// concurrency.Mutex has no extend: its session's keepalive is the only renewal.
		return refusal("unsupported", errors.New("concurrency.Mutex has no extend"))
	case "events":
		return c.drainEvents()
	default:
		return refusal("error", fmt.Errorf("unknown op %q", req.Op))
	}
}

func (c *client) hello(req request) reply {
	if req.Protocol != protocolVersion {
		return refusal("error", fmt.Errorf("speaks protocol %d, asked for %d", protocolVersion, req.Protocol))
	}
	c.mu.Lock()
	c.nodes = req.Nodes
	if req.TimeoutM > 0 {
		c.timeout = time.Duration(req.TimeoutM) * time.Millisecond
	}
	c.mu.Unlock()
	// No connection here: a member that is down must be a refusal at acquire, not a failed start.
	return reply{
		"ok":           true,
		"protocol":     protocolVersion,
		"library":      "go.etcd.io/etcd/clientv3/concurrency.Mutex",
		"version":      clientVersion(),
		"versions":     map[string]string{"go.etcd.io/etcd/clientv3": clientVersion()}, // what each row records
		"runtime":      runtime.Version(),
		"monotonic_ns": monotonicNs(),
	}
}

// etcd returns the client, made on first use. clientv3.New does not block on the dial: an
// unreachable member makes the first request fail within its deadline instead.
func (c *client) etcd() (*clientv3.Client, time.Duration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cli != nil {
		return c.cli, c.timeout, nil
	}
	logs := zap.NewProductionConfig()
	logs.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
	logs.OutputPaths = []string{"stderr"}
	logs.ErrorOutputPaths = []string{"stderr"}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.nodes, DialTimeout: c.timeout, LogConfig: &logs})
	if err != nil {
		return nil, 0, err
	}
	c.cli = cli
	return cli, c.timeout, nil
}

func (c *client) acquire(req request) reply {
	if req.TTLMs < 1000 || req.TTLMs%1000 != 0 {
		return refusal("ttl", fmt.Errorf("an etcd session's TTL is whole seconds, not %d ms", req.TTLMs))
	}
	seconds := req.TTLMs / 1000
	cli, timeout, err := c.etcd()
	if err != nil {
		return refusal("error", err)
	}
	start := monotonicNs()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// The session's lease is granted under the attempt's deadline (NewSession alone would grant it
	// without one); the session then keeps it alive on the client's own context, as NewSession does.
	grant, err := cli.Grant(ctx, seconds)
	if err != nil {
		return c.refused(refusal("error", err), start)
	}
	if grant.TTL != seconds {
		_, _ = cli.Revoke(context.Background(), grant.ID)
		return c.refused(refusal("error", fmt.Errorf("etcd granted a %d s lease when asked for %d s", grant.TTL, seconds)), start)
	}
	session, err := concurrency.NewSession(cli, concurrency.WithLease(grant.ID), concurrency.WithTTL(int(seconds)))
	if err != nil {
		_, _ = cli.Revoke(context.Background(), grant.ID)
		return c.refused(refusal("error", err), start)
	}
	h := &holding{session: session, validUntil: start + req.TTLMs*1_000_000}
	c.watch(h, cli, grant.ID)
	m := concurrency.NewMutex(session, req.Key)
	if err := m.Lock(ctx); err != nil {
		h.stopWatch()
		_ = session.Close()
		// Lock's first transaction put our key in the queue (its create revision is known) and the
		// wait for the holder ran out of time: the lock is held. Otherwise etcd did not answer.
		if ctx.Err() != nil && (createRevision(m) > 0 || m.Key() == "\x00") {
			return c.refused(refusal("held", nil), start)
		}
		return c.refused(refusal("error", err), start)
	}
	owner := m.Key() // what the mutex stores: <key>/<lease id in hex>, unique per session
	c.mu.Lock()
	h.mutex, h.owner, h.granted = m, owner, true
	validUntil, lost := h.validUntil, h.lost
	if !lost {
		c.holdings[owner] = h
	}
	c.mu.Unlock()
	if lost { // the session ended while Lock waited (3.4's Lock does not look): no lease behind it
		h.stopWatch()
		_ = m.Unlock(ctx)
		_ = session.Close()
		return c.refused(refusal("lost", nil), start)
	}
	r := reply{"ok": true, "owner": owner, "valid_until": validUntil, "library_ns": monotonicNs() - start}
	if c.fenced {
		r["token"] = createRevision(m)
	}
	return r
}

func (c *client) refused(r reply, start int64) reply {
	r["library_ns"] = monotonicNs() - start
	return r
}

// createRevision is the create revision of the mutex's key, as the mutex itself compares it
// (IsOwner: create_revision(key) == myRev); -1 before its first transaction.
func createRevision(m *concurrency.Mutex) int64 {
	cmp := m.IsOwner()
	if rev, ok := cmp.TargetUnion.(*pb.Compare_CreateRevision); ok {
		return rev.CreateRevision
	}
	return -1
}

// watch follows the session's lease: each keepalive reply the client's lessor delivers (a second
// channel on the same lessor entry: no extra keepalive is sent) is a renewal, and the session's
// Done() is its end. The whole Go runtime freezes with the process: nothing here runs in a pause.
func (c *client) watch(h *holding, cli *clientv3.Client, id clientv3.LeaseID) {
	ctx, cancel := context.WithCancel(context.Background())
	h.stopWatch = cancel
	replies, err := cli.KeepAlive(ctx, id)
	if err != nil {
		replies = nil
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case resp, ok := <-replies:
				if !ok {
					replies = nil // the lessor gave up on the lease: Done() follows
					continue
				}
				now := monotonicNs()
				c.mu.Lock()
				// The library's own belief (lessor.recvKeepAlive): the reply's TTL from now.
				h.validUntil = now + resp.TTL*int64(time.Second)
				if h.granted && !h.releasing {
					until := h.validUntil
					c.events = append(c.events, event{T0: now, T1: now, OK: true, Owner: h.owner, ValidUntil: &until})
				}
				c.mu.Unlock()
			case <-h.session.Done():
				now := monotonicNs()
				c.mu.Lock()
				if !h.releasing {
					h.lost = true
					if h.granted {
						reason := "lost"
						c.events = append(c.events, event{T0: now, T1: now, OK: false, Owner: h.owner, Reason: &reason})
					}
				}
				c.mu.Unlock()
				return
			}
		}
	}()
}

func (c *client) release(req request) reply {
	c.mu.Lock()
	h := c.holdings[req.Owner]
	delete(c.holdings, req.Owner)
	var timeout time.Duration
	if h != nil {
		h.releasing = true
		timeout = c.timeout
	}
	c.mu.Unlock()
	if h == nil {
		return reply{"ok": true, "released": false}
	}
	start := monotonicNs()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	unlockErr := h.mutex.Unlock(ctx)
	h.stopWatch()
	// Close revokes the session's lease: it succeeds only while the lease (and so our key, which
	// Unlock deleted) was still alive. An expired lease ("lease not found") released nothing.
	closeErr := h.session.Close()
	r := reply{"ok": true, "released": unlockErr == nil && closeErr == nil, "library_ns": monotonicNs() - start}
	if unlockErr != nil || closeErr != nil {
		r["error"] = fmt.Sprintf("unlock: %v; close: %v", unlockErr, closeErr)
	}
	return r
}

// check is what a Go program can look at before its write without a request: the session's Done()
// and the deadline its lessor believes.
func (c *client) check(req request) reply {
	now := monotonicNs()
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.holdings[req.Owner]
	switch {
	case h == nil:
		return reply{"ok": true, "valid": false, "reason": "unknown"}
	case h.lost:
		return reply{"ok": true, "valid": false, "reason": "lost"}
	case now >= h.validUntil:
		return reply{"ok": true, "valid": false, "reason": "expired"}
	}
	return reply{"ok": true, "valid": true, "valid_until": h.validUntil}
}

func (c *client) drainEvents() reply {
	c.mu.Lock()
	events := c.events
	c.events = nil
	c.mu.Unlock()
	sort.SliceStable(events, func(i, j int) bool { return events[i].T0 < events[j].T0 })
	if events == nil {
		events = []event{}
	}
	return reply{"ok": true, "events": events}
}
