package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterOptions shapes a Redis Cluster.
type ClusterOptions struct {
	// Masters is the number of slot-owning nodes (at least 1; 3 is the
	// smallest layout Redis recommends).
	Masters int
	// ReplicasPerMaster adds this many replicas to each master, so tests can
	// kill a master and watch a replica take over.
	ReplicasPerMaster int
	// NodeTimeout is cluster-node-timeout: how long a master may be
	// unreachable before its replica fails over. Zero means 2s.
	NodeTimeout time.Duration
	// StartTimeout bounds starting the processes and forming the cluster.
	// Zero means 30s.
	StartTimeout time.Duration
}

// Cluster is a running Redis Cluster. Nodes[0:Masters] start as masters,
// the rest as replicas (replica j of master m is Nodes[Masters+m*R+j]).
type Cluster struct {
	opts   ClusterOptions
	root   string
	nodes  []*process
	ids    []string // cluster node id per node
	client *redis.ClusterClient
	closed sync.Once
}

// totalSlots is the fixed size of the Redis Cluster keyspace
// (https://redis.io/docs/reference/cluster-spec/#key-distribution-model).
const totalSlots = 16384

// StartCluster starts Masters*(1+ReplicasPerMaster) cluster-enabled
// redis-server processes, assigns slot ranges evenly to the masters, joins
// the nodes with CLUSTER MEET, attaches replicas with CLUSTER REPLICATE and
// waits until every node reports cluster_state:ok and the same slot map.
// The caller must Close it.
func StartCluster(ctx context.Context, opts ClusterOptions) (*Cluster, error) {
	if opts.Masters < 1 || opts.Masters > 64 {
		return nil, fmt.Errorf("redistest: cluster masters %d: want 1..64", opts.Masters)
	}
	if opts.ReplicasPerMaster < 0 || opts.ReplicasPerMaster > 4 {
		return nil, fmt.Errorf("redistest: cluster replicas per master %d: want 0..4", opts.ReplicasPerMaster)
	}
	if opts.NodeTimeout <= 0 {
		opts.NodeTimeout = 2 * time.Second
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()

	root, err := os.MkdirTemp("", "redistest-cluster-")
	if err != nil {
		return nil, fmt.Errorf("redistest: temp dir: %w", err)
	}
	c := &Cluster{opts: opts, root: root}
	if err := c.start(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context) error {
	n := c.opts.Masters * (1 + c.opts.ReplicasPerMaster)
	args := []string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "{dir}/nodes-{port}.conf",
		"--cluster-node-timeout", strconv.FormatInt(c.opts.NodeTimeout.Milliseconds(), 10),
		// A replica of a freshly started test cluster must always be allowed
		// to fail over, however long its link to the master has been down.
		"--cluster-replica-validity-factor", "0",
	}
	for i := 0; i < n; i++ {
		p, err := startProcess(ctx, c.root, args, 0)
		if err != nil {
			return fmt.Errorf("redistest: cluster node %d: %w", i, err)
		}
		c.nodes = append(c.nodes, p)
	}

	admins := make([]*redis.Client, n)
	for i, p := range c.nodes {
		admins[i] = redis.NewClient(clientOptions(p.addr))
	}
	defer func() {
		for _, a := range admins {
			a.Close()
		}
	}()
	c.ids = make([]string, n)
	for i, a := range admins {
		id, err := a.ClusterMyID(ctx).Result()
		if err != nil {
			return fmt.Errorf("redistest: cluster node %d (%s): CLUSTER MYID: %w", i, c.nodes[i].addr, err)
		}
		c.ids[i] = id
	}

	// Slots before MEET: nodes then learn each other's slots through the
	// gossip that MEET starts, with no epoch collisions to resolve.
	for m := 0; m < c.opts.Masters; m++ {
		lo, hi := slotRange(m, c.opts.Masters)
		if err := admins[m].ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			return fmt.Errorf("redistest: cluster node %d: ADDSLOTSRANGE %d %d: %w", m, lo, hi, err)
		}
	}
	for i := 1; i < n; i++ {
		if err := admins[i].ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(c.nodes[0].port)).Err(); err != nil {
			return fmt.Errorf("redistest: cluster node %d: MEET: %w", i, err)
		}
	}
	if err := c.waitAllKnown(ctx, admins); err != nil {
		return err
	}
	for m := 0; m < c.opts.Masters; m++ {
		for j := 0; j < c.opts.ReplicasPerMaster; j++ {
			r := c.opts.Masters + m*c.opts.ReplicasPerMaster + j
			if err := admins[r].ClusterReplicate(ctx, c.ids[m]).Err(); err != nil {
				return fmt.Errorf("redistest: cluster node %d: REPLICATE %s: %w", r, c.ids[m], err)
			}
		}
	}
	if err := c.waitOK(ctx); err != nil {
		return err
	}
	c.client = redis.NewClusterClient(c.clusterOptions())
	return nil
}

// slotRange splits the 16384 slots into `of` near-equal contiguous ranges.
func slotRange(i, of int) (lo, hi int) {
	return i * totalSlots / of, (i+1)*totalSlots/of - 1
}

// waitAllKnown waits until every node lists every other node, so that
// CLUSTER REPLICATE can name a master the replica has heard of.
func (c *Cluster) waitAllKnown(ctx context.Context, admins []*redis.Client) error {
	return poll(ctx, "every node to know all nodes", func() error {
		for i, a := range admins {
			out, err := a.ClusterNodes(ctx).Result()
			if err != nil {
				return fmt.Errorf("node %d CLUSTER NODES: %w", i, err)
			}
			known := 0
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				if f := strings.Fields(line); len(f) > 2 && !strings.Contains(f[2], "handshake") {
					known++
				}
			}
			if known != len(admins) {
				return fmt.Errorf("node %d knows %d of %d nodes", i, known, len(admins))
			}
		}
		return nil
	})
}

// WaitOK waits until every live node reports cluster_state:ok, all live
// nodes agree on the slot map (owner of each range, with its replicas),
// and each range's owner is live. After KillNode, it waits for failover,
// then makes the Cluster's own client reload the slot map: go-redis only
// reloads on MOVED or every ClusterStateReloadInterval (60s by default),
// and a dead master sends no MOVED. Clients from NewClient must call
// ReloadState themselves.
func (c *Cluster) WaitOK(ctx context.Context) error {
	err := c.waitOK(ctx)
	if err == nil && c.client != nil {
		c.client.ReloadState(ctx)
	}
	return err
}

func (c *Cluster) waitOK(ctx context.Context) error {
	return poll(ctx, "cluster_state:ok and an agreed slot map", func() error {
		var want string
		for i, p := range c.nodes {
			if !p.alive() {
				continue
			}
			a := redis.NewClient(clientOptions(p.addr))
			info, err := a.ClusterInfo(ctx).Result()
			if err != nil {
				a.Close()
				return fmt.Errorf("node %d CLUSTER INFO: %w", i, err)
			}
			if !strings.Contains(info, "cluster_state:ok") {
				a.Close()
				return fmt.Errorf("node %d: cluster_state not ok", i)
			}
			//lint:ignore SA1019 CLUSTER SLOTS is what go-redis's own ClusterClient reads; agreeing on it is the point.
			slots, err := a.ClusterSlots(ctx).Result()
			a.Close()
			if err != nil {
				return fmt.Errorf("node %d CLUSTER SLOTS: %w", i, err)
			}
			m, err := c.slotMap(slots)
			if err != nil {
				return fmt.Errorf("node %d: %w", i, err)
			}
			if want == "" {
				want = m
			} else if m != want {
				return fmt.Errorf("node %d slot map %q differs from %q", i, m, want)
			}
		}
		if want == "" {
			return errors.New("no live node")
		}
		return nil
	})
}

// slotMap renders CLUSTER SLOTS canonically and checks full coverage by
// live masters, with every expected replica of a live master attached.
func (c *Cluster) slotMap(slots []redis.ClusterSlot) (string, error) {
	sort.Slice(slots, func(i, j int) bool { return slots[i].Start < slots[j].Start })
	var b strings.Builder
	next := 0
	for _, s := range slots {
		if s.Start != next {
			return "", fmt.Errorf("slots %d..%d unassigned", next, s.Start-1)
		}
		next = s.End + 1
		if len(s.Nodes) == 0 {
			return "", fmt.Errorf("slots %d..%d have no node", s.Start, s.End)
		}
		owner := c.nodeByAddr(s.Nodes[0].Addr)
		if owner < 0 || !c.nodes[owner].alive() {
			return "", fmt.Errorf("slots %d..%d owned by dead or unknown node %s", s.Start, s.End, s.Nodes[0].Addr)
		}
		if want := c.liveReplicasOf(owner); len(s.Nodes)-1 < want {
			return "", fmt.Errorf("slots %d..%d: %d of %d replicas attached", s.Start, s.End, len(s.Nodes)-1, want)
		}
		ids := make([]string, 0, len(s.Nodes))
		for _, n := range s.Nodes {
			ids = append(ids, n.ID)
		}
		sort.Strings(ids[1:])
		fmt.Fprintf(&b, "%d-%d:%s;", s.Start, s.End, strings.Join(ids, ","))
	}
	if next != totalSlots {
		return "", fmt.Errorf("slots %d..%d unassigned", next, totalSlots-1)
	}
	return b.String(), nil
}

// liveReplicasOf counts the live nodes first configured as replicas of the
// group that node i belongs to, excluding i itself (after a failover the
// owner may be a former replica).
func (c *Cluster) liveReplicasOf(i int) int {
	if c.opts.ReplicasPerMaster == 0 {
		return 0
	}
	group := c.groupOf(i)
	n := 0
	for j, p := range c.nodes {
		if j != i && p.alive() && c.groupOf(j) == group {
			n++
		}
	}
	return n
}

// groupOf returns the master index whose shard node i was created for.
func (c *Cluster) groupOf(i int) int {
	if i < c.opts.Masters {
		return i
	}
	return (i - c.opts.Masters) / c.opts.ReplicasPerMaster
}

func (c *Cluster) nodeByAddr(addr string) int {
	for i, p := range c.nodes {
		if p.addr == addr {
			return i
		}
	}
	return -1
}

func (c *Cluster) clusterOptions() *redis.ClusterOptions {
	return &redis.ClusterOptions{Addrs: c.Addrs(), DisableIdentity: true}
}

// Addrs lists every node's host:port, in node order.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, p := range c.nodes {
		out[i] = p.addr
	}
	return out
}

// Client returns a cluster client owned by the Cluster (closed by Close).
func (c *Cluster) Client() redis.UniversalClient { return c.client }

// NewClient returns a fresh cluster client, as a second process would
// have; the caller closes it.
func (c *Cluster) NewClient() redis.UniversalClient {
	return redis.NewClusterClient(c.clusterOptions())
}

// KillNode SIGKILLs node i (no shutdown, no save), as a crashed host would
// die. With replicas, a replica of a killed master takes over after about
// NodeTimeout; WaitOK waits for that.
func (c *Cluster) KillNode(i int) error {
	if i < 0 || i >= len(c.nodes) {
		return fmt.Errorf("redistest: kill node %d: cluster has %d nodes", i, len(c.nodes))
	}
	c.nodes[i].kill()
	return nil
}

// Close kills every node and removes the temporary directories.
func (c *Cluster) Close() error {
	var err error
	c.closed.Do(func() {
		if c.client != nil {
			c.client.Close()
		}
		for _, p := range c.nodes {
			p.kill()
		}
		err = os.RemoveAll(c.root)
		if err != nil {
			err = fmt.Errorf("redistest: remove %s: %w", c.root, err)
		}
	})
	return err
}

// poll retries check every 50ms until it succeeds or ctx ends, and then
// reports the last reason it failed.
func poll(ctx context.Context, what string, check func() error) error {
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: waiting for %s: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
