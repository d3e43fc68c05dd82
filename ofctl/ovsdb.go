package ofctl

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/ovn-org/libovsdb/cache"
	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/ovsdb"
	"k8s.io/klog/v2"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// ErrBridgeNotFound is returned (wrapped, with the bridge name) when a bridge the agent does not
// create, br-ex, is missing from OVSDB.
var ErrBridgeNotFound = errors.New("bridge not found")

// ErrPortNotFound is returned (wrapped, with the port name) when a port the agent does not
// create, the uplink, is missing from its bridge.
var ErrPortNotFound = errors.New("port not found")

// Defaults of IntegrationConfig.
const (
	// DefaultPatchExToInt is the patch port on br-ex that leads to br-int.
	DefaultPatchExToInt = "patch-ex-to-int"
	// DefaultPatchIntToEx is the patch port on br-int that leads to br-ex.
	DefaultPatchIntToEx = "patch-int-to-ex"
	// DefaultGenevePort is the name of the flow-based Geneve port on br-int.
	DefaultGenevePort = "srcip-geneve0"
	// DefaultGeneveUDPPort is the IANA Geneve port (RFC 8926), also used by OVN.
	DefaultGeneveUDPPort = 6081
	// DefaultGatewayPort is the internal port on br-int that holds the pod gateway address on the
	// host (created by the node set-up step, never by the agent).
	DefaultGatewayPort = "srcip-gw0"
)

// defaultPortWait bounds how long EnsureIntegration waits for ovs-vswitchd to assign ofports.
const defaultPortWait = 30 * time.Second

// DB is a connection to the Open_vSwitch database of ovsdb-server (ovs-vswitchd.conf.db(5)),
// with a client-side cache of the Open_vSwitch, Bridge, Port, Interface and Flow_Table tables
// (or what OnlyPorts narrows it to) kept current by an OVSDB monitor. It reconnects by itself when ovsdb-server restarts.
// Its methods are safe for concurrent use.
type DB struct {
	c client.Client
	// changes and podChanges are Changes and PodPortChanges (filled by classify).
	changes, podChanges chan struct{}
	// wake is closed and replaced at every cache change (onEvent; wakeup).
	wakeMu sync.Mutex
	wake   chan struct{}
	// forceFull: the next classification is a full change (a reconnect).
	forceFull    atomic.Bool
	classifyOnce sync.Once
	done         chan struct{}
	closeOnce    sync.Once
	logger       klog.Logger // Connect's
	// warnedFailMode is br-ex's fail mode EnsureIntegration last warned about ("" = none), so
	// that the warning is logged once per change, not at every sync.
	warnedFailMode atomic.Value
	// gatewayState is what EnsureIntegration last logged about the gateway port ("" = nothing
	// yet), so that its absence is logged once, not at every full sync.
	gatewayState atomic.Value
	// uplink is the uplink EnsureIntegration last found (logged only when it changes).
	uplink atomic.Value
	// secondaryErr is the last logged problem with a secondary uplink ("" none).
	secondaryErr atomic.Value
}

// ConnectOption narrows what Connect monitors.
type ConnectOption func(*connectOptions)

type connectOptions struct {
	// ports (non-nil: OnlyPorts) are the only Port and Interface rows monitored.
	ports []string
}

// OnlyPorts makes Connect monitor the Bridge table and, of the Port and Interface tables, only
// the rows whose name is one of names (OVSDB conditional monitoring, ovsdb-server(7)
// "monitor_cond": the server sends no other row and no change of another row); the
// Open_vSwitch and Flow_Table tables are not monitored. It is for a short-lived client that
// reads its bridge and its own port, srcip-cni's ADD: in a burst of pod starts each one then
// receives its own port's updates instead of every other pod's. Every method keeps working on
// what the cache holds: those that walk a bridge's ports (PodPorts, ContainerPorts,
// DetachContainer, EnsureIntegration) see only the named ones. No names: the Port and
// Interface tables are not monitored.
func OnlyPorts(names ...string) ConnectOption {
	return func(o *connectOptions) { o.ports = append([]string{}, names...) }
}

// Connect connects to ovsdb-server at endpoint ("unix:/path/db.sock", a bare "/path/db.sock",
// "tcp:IP:PORT"; see NormalizeEndpoint), starts
// monitoring the tables the agent reads (or what opts narrow it to) and returns when the cache
// holds the current contents.
// The client reconnects forever (exponential backoff up to 5 s) after a lost connection and
// then repopulates the cache; see Changes. Call Close when done.
func Connect(ctx context.Context, endpoint string, opts ...ConnectOption) (*DB, error) {
	var co connectOptions
	for _, o := range opts {
		o(&co)
	}
	endpoint, err := NormalizeEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	dbModel, err := model.NewClientDBModel("Open_vSwitch", map[string]model.Model{
		tableOpenVSwitch: &ovsRow{},
		tableBridge:      &bridgeRow{},
		tablePort:        &portRow{},
		tableInterface:   &ifaceRow{},
		tableFlowTable:   &flowTableRow{},
	})
	if err != nil {
		return nil, fmt.Errorf("ovsdb model: %w", err)
	}
	// libovsdb logs connection events at V(3) and every cache update at V(5): shift them to
	// V(7) and V(9) of the agent's logger.
	logger := klog.FromContext(ctx).WithName("libovsdb").V(4)
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 100 * time.Millisecond
	bo.MaxInterval = 5 * time.Second
	bo.MaxElapsedTime = 0 // never give up: libovsdb panics when its reconnect backoff stops
	c, err := client.NewOVSDBClient(dbModel,
		client.WithEndpoint(endpoint),
		client.WithReconnect(10*time.Second, bo),
		client.WithLogger(&logger))
	if err != nil {
		return nil, fmt.Errorf("ovsdb client for %s: %w", endpoint, err)
	}
	if err := c.Connect(ctx); err != nil {
		return nil, fmt.Errorf("connect to ovsdb %s: %w%s", endpoint, err, connectHint(endpoint))
	}
	d := &DB{c: c, changes: make(chan struct{}, 1), podChanges: make(chan struct{}, 1),
		wake: make(chan struct{}), done: make(chan struct{}), logger: klog.FromContext(ctx)}
	c.Cache().AddEventHandler(&cache.EventHandlerFuncs{
		AddFunc:    func(table string, _ model.Model) { d.onEvent(table, true) },
		UpdateFunc: func(table string, _, _ model.Model) { d.onEvent(table, false) },
		DeleteFunc: func(table string, _ model.Model) { d.onEvent(table, true) },
	})
	// Monitor only the columns of the models: Interface statistics and status change every few
	// seconds and must not wake the agent.
	var (
		o  ovsRow
		b  bridgeRow
		p  portRow
		i  ifaceRow
		ft flowTableRow
	)
	bridges := client.WithTable(&b, &b.Name, &b.DatapathType, &b.FailMode, &b.Protocols, &b.Ports, &b.FlowTables, &b.OtherConfig)
	portCols := []any{&p.Name, &p.Interfaces, &p.Tag}
	ifaceCols := []any{&i.Name, &i.Type, &i.Options, &i.ExternalIDs, &i.OFPort, &i.MACInUse, &i.Error, &i.MTURequest}
	var mon *client.Monitor
	if co.ports == nil {
		mon = c.NewMonitor(
			client.WithTable(&o, &o.Bridges),
			bridges,
			client.WithTable(&p, portCols...),
			client.WithTable(&i, ifaceCols...),
			client.WithTable(&ft, &ft.Name),
		)
	} else {
		// ovsdb-server sends a row that matches any clause of a table's condition (a
		// disjunction: one clause per name).
		tables := []client.MonitorOption{bridges}
		if len(co.ports) > 0 {
			pc := make([]model.Condition, 0, len(co.ports))
			ic := make([]model.Condition, 0, len(co.ports))
			for _, name := range co.ports {
				pc = append(pc, model.Condition{Field: &p.Name, Function: ovsdb.ConditionEqual, Value: name})
				ic = append(ic, model.Condition{Field: &i.Name, Function: ovsdb.ConditionEqual, Value: name})
			}
			tables = append(tables,
				client.WithConditionalTable(&p, pc, portCols...),
				client.WithConditionalTable(&i, ic, ifaceCols...))
		}
		mon = c.NewMonitor(tables...)
	}
	if _, err := c.Monitor(ctx, mon); err != nil {
		c.Close()
		return nil, fmt.Errorf("monitor ovsdb %s: %w", endpoint, err)
	}
	return d, nil
}

// NormalizeEndpoint returns an OVSDB endpoint in the form libovsdb takes: a bare socket path
// ("/var/run/openvswitch/db.sock") becomes "unix:PATH"; "unix:", "tcp:" and "ssl:" endpoints are
// returned as given. Anything else is an error that says what to write.
func NormalizeEndpoint(s string) (string, error) {
	switch {
	case strings.HasPrefix(s, "/"):
		return "unix:" + s, nil
	case strings.HasPrefix(s, "unix:"), strings.HasPrefix(s, "tcp:"), strings.HasPrefix(s, "ssl:"):
		return s, nil
	}
	return "", fmt.Errorf("OVSDB endpoint %q: want unix:PATH (e.g. unix:/var/run/openvswitch/db.sock), tcp:IP:PORT or ssl:IP:PORT", s)
}

// connectHint says what to check when ovsdb-server cannot be reached at endpoint.
func connectHint(endpoint string) string {
	path, ok := strings.CutPrefix(endpoint, "unix:")
	if !ok {
		return " (is ovsdb-server listening there?)"
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Sprintf(" (no socket at %s: is Open vSwitch running on this node? `systemctl status openvswitch-switch` or `ovs-ctl status`; in a Pod, mount the host's OVS run directory; --ovsdb names the socket)", path)
	}
	return fmt.Sprintf(" (the socket %s exists but ovsdb-server does not answer: is it running? `ovs-appctl -t ovsdb-server version`)", path)
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Close closes the connection; the DB must not be used afterwards.
func (d *DB) Close() {
	d.closeOnce.Do(func() { close(d.done) })
	d.c.Close()
}

// Connected reports whether the OVSDB connection is up right now (libovsdb reconnects in the
// background after a loss; the agent's /healthz reports false meanwhile).
func (d *DB) Connected() bool { return d.c.Connected() }

// Changes returns a channel that receives (coalesced: capacity 1, never blocks the sender) after
// a change of a cached Open_vSwitch, Bridge, Port, Interface or Flow_Table row other than a pod
// port's (bridges, their uplink, patch, tunnel and gateway ports, ofports: what
// EnsureIntegration reads), after the initial population and after a reconnect. A receive means
// "look again", not what changed. Changes of pod ports alone (Interfaces whose external_ids name
// a pod, their Ports, those Ports in Bridge.ports) go to PodPortChanges only. A restart of
// ovs-vswitchd alone (which loses every OpenFlow flow) is not visible in OVSDB: see
// WatchVswitchd.
func (d *DB) Changes() <-chan struct{} {
	d.startClassifier()
	return d.changes
}

// IntegrationConfig names the objects EnsureIntegration creates or checks. Zero values take the
// Default* constants.
type IntegrationConfig struct {
	// BrEx is the external bridge; it must exist (it is created by the node installer).
	BrEx string
	// BrInt is the integration bridge; it is created when missing.
	BrInt string
	// Uplink is the name of the uplink port on BrEx (e.g. "eth0"); it must exist. Empty: the only
	// port of BrEx that is not internal, patch or tunnel (ErrUplinkAmbiguous if there is not
	// exactly one).
	Uplink string
	// PatchExToInt is the patch port on BrEx whose peer is PatchIntToEx on BrInt.
	PatchExToInt string
	// PatchIntToEx is the patch port on BrInt whose peer is PatchExToInt on BrEx.
	PatchIntToEx string
	// GenevePort is the name of the flow-based Geneve port on BrInt.
	GenevePort string
	// GeneveUDPPort is the Geneve UDP destination port (options:dst_port); use another port than
	// 6081 when the host also runs OVN.
	GeneveUDPPort int
	// GatewayPort is the internal port on BrInt that holds the pod gateway address on the host
	// (created by the node set-up step). It is optional: when it is missing EnsureIntegration
	// returns Ports without it (IntGateway 0) and the pipeline has no host connectivity flows.
	// "-" disables the lookup.
	GatewayPort string
	// PortWait bounds the wait for ovs-vswitchd to assign ofports (0: 30 s).
	PortWait time.Duration
}

func (c *IntegrationConfig) defaults() error {
	if c.BrEx == "" || c.BrInt == "" {
		return errors.New("integration config: BrEx and BrInt are required")
	}
	if c.PatchExToInt == "" {
		c.PatchExToInt = DefaultPatchExToInt
	}
	if c.PatchIntToEx == "" {
		c.PatchIntToEx = DefaultPatchIntToEx
	}
	if c.GenevePort == "" {
		c.GenevePort = DefaultGenevePort
	}
	if c.GeneveUDPPort == 0 {
		c.GeneveUDPPort = DefaultGeneveUDPPort
	}
	if c.GeneveUDPPort < 1 || c.GeneveUDPPort > 65535 {
		return fmt.Errorf("integration config: geneve UDP port %d out of range", c.GeneveUDPPort)
	}
	if c.PortWait == 0 {
		c.PortWait = defaultPortWait
	}
	if c.GatewayPort == "" {
		c.GatewayPort = DefaultGatewayPort
	}
	return nil
}

// brIntProtocols are the OpenFlow versions br-int must allow (Bridge.protocols): 1.0 for
// ovs-ofctl's defaults, 1.3 for other controllers, 1.5 for the agent's bundles and groups.
var brIntProtocols = []string{"OpenFlow10", "OpenFlow13", "OpenFlow15"}

// txn collects the operations of one OVSDB transaction and hands out named UUIDs.
type txn struct {
	ops []ovsdb.Operation
	n   int
}

func (t *txn) name() string {
	t.n++
	return "row" + strconv.Itoa(t.n)
}

func (t *txn) add(ops []ovsdb.Operation, err error) error {
	if err != nil {
		return err
	}
	t.ops = append(t.ops, ops...)
	return nil
}

// EnsureIntegration makes the integration plumbing exist, idempotently and through OVSDB
// transactions: br-int (created with br-ex's datapath_type, because patch ports only join bridges
// of the same datapath type; fail_mode=secure; protocols OpenFlow10/13/15 added when missing),
// the patch pair between br-ex and br-int (type patch, options:peer) and the flow-based Geneve
// port on br-int (type geneve, options remote_ip=flow, key=flow, dst_port). Objects that are
// already right are not written; a wrong type or option is corrected; other options and
// protocols are kept. It then waits (at most c.PortWait, or until ctx ends) for ovs-vswitchd to
// assign ofports and returns them with br-ex's MAC (Interface.mac_in_use of its internal port).
// Errors: ErrBridgeNotFound for a missing br-ex, ErrPortNotFound for a missing uplink, a
// transaction error, or a timeout naming the ports still without an ofport.
func (d *DB) EnsureIntegration(ctx context.Context, c IntegrationConfig) (flows.Ports, error) {
	if err := c.defaults(); err != nil {
		return flows.Ports{}, err
	}
	log := klog.FromContext(ctx).WithValues("brEx", c.BrEx, "brInt", c.BrInt)
	ex := &bridgeRow{Name: c.BrEx}
	if err := d.c.Get(ctx, ex); err != nil {
		if errors.Is(err, client.ErrNotFound) {
			return flows.Ports{}, fmt.Errorf("%s: %w: the external bridge must exist before the agent starts, holding the uplink NIC and the node IP (README \"Node contract\"); build it with `srcip-agent node-setup` (the DaemonSet's init container, docs/install.md) or name another with --bridge-ex", c.BrEx, ErrBridgeNotFound)
		}
		return flows.Ports{}, fmt.Errorf("read bridge %s: %w", c.BrEx, err)
	}
	if ex.FailMode == nil || *ex.FailMode != "secure" {
		// The agent's flows end br-ex in NORMAL for ports it does not own; with fail_mode=secure
		// that flow only exists together with the agent's hooks. In standalone mode (or unset)
		// a restarted ovs-vswitchd forwards everything with its own NORMAL flow until the agent
		// has replayed (docs/field-cases.md#c19). The mode belongs to the node installer.
		mode := "standalone (unset)"
		if ex.FailMode != nil {
			mode = *ex.FailMode
		}
		if prev, _ := d.warnedFailMode.Load().(string); prev != mode {
			d.warnedFailMode.Store(mode)
			log.Info("Warning: the external bridge is not fail_mode=secure; after an ovs-vswitchd restart it forwards with NORMAL, Service entry points included, until the agent's flows are back (docs/field-cases.md#c19)", "failMode", mode)
		}
	} else {
		d.warnedFailMode.Store("")
	}
	if c.Uplink == "" {
		up, err := d.findUplink(ctx, ex, c.PatchExToInt)
		if err != nil {
			return flows.Ports{}, err
		}
		// Logged when it is found or changes, not at every full sync.
		if prev, _ := d.uplink.Swap(up).(string); prev != up {
			log.Info("Found the uplink of the external bridge", "uplink", up)
		}
		c.Uplink = up
	}
	if br, err := d.portBridge(ctx, c.Uplink); err != nil {
		return flows.Ports{}, err
	} else if br != c.BrEx {
		return flows.Ports{}, fmt.Errorf("uplink %s on %s: %w", c.Uplink, c.BrEx, ErrPortNotFound)
	}

	t := &txn{}
	in := &bridgeRow{Name: c.BrInt}
	newInt := false
	switch err := d.c.Get(ctx, in); {
	case errors.Is(err, client.ErrNotFound):
		newInt = true
		secure := "secure"
		in = &bridgeRow{UUID: t.name(), Name: c.BrInt, DatapathType: ex.DatapathType,
			FailMode: &secure, Protocols: brIntProtocols}
		// The bridge's internal port, as ovs-vsctl add-br creates it.
		if err := d.createPort(t, in, true, c.BrInt, "internal", nil); err != nil {
			return flows.Ports{}, err
		}
	case err != nil:
		return flows.Ports{}, fmt.Errorf("read bridge %s: %w", c.BrInt, err)
	default:
		if err := d.fixBridge(t, in, ex.DatapathType); err != nil {
			return flows.Ports{}, err
		}
	}

	want := []struct {
		br    *bridgeRow
		isNew bool
		name  string
		typ   string
		opts  map[string]string
	}{
		{ex, false, c.PatchExToInt, "patch", map[string]string{"peer": c.PatchIntToEx}},
		{in, newInt, c.PatchIntToEx, "patch", map[string]string{"peer": c.PatchExToInt}},
		{in, newInt, c.GenevePort, "geneve", map[string]string{
			"remote_ip": "flow", "key": "flow", "dst_port": strconv.Itoa(c.GeneveUDPPort)}},
	}
	for _, w := range want {
		if err := d.ensurePort(ctx, t, w.br, w.isNew, w.name, w.typ, w.opts); err != nil {
			return flows.Ports{}, err
		}
	}
	if newInt {
		if err := t.add(d.c.Create(in)); err != nil {
			return flows.Ports{}, fmt.Errorf("create bridge %s: %w", c.BrInt, err)
		}
		var roots []ovsRow
		if err := d.c.List(ctx, &roots); err != nil {
			return flows.Ports{}, fmt.Errorf("read Open_vSwitch root row: %w", err)
		}
		if len(roots) != 1 {
			return flows.Ports{}, fmt.Errorf("read Open_vSwitch root row: %d rows, want 1", len(roots))
		}
		root := &roots[0]
		if err := t.add(d.c.Where(root).Mutate(root, model.Mutation{
			Field: &root.Bridges, Mutator: ovsdb.MutateOperationInsert, Value: []string{in.UUID},
		})); err != nil {
			return flows.Ports{}, fmt.Errorf("add bridge %s: %w", c.BrInt, err)
		}
	}
	if err := d.transact(ctx, t); err != nil {
		return flows.Ports{}, fmt.Errorf("ensure integration of %s and %s: %w", c.BrEx, c.BrInt, err)
	}
	if len(t.ops) > 0 {
		log.V(2).Info("Updated OVS integration objects", "operations", len(t.ops), "createdBrInt", newInt)
	}
	return d.waitPorts(ctx, c)
}

// fixBridge corrects datapath_type, fail_mode and missing protocols of an existing br-int.
func (d *DB) fixBridge(t *txn, in *bridgeRow, dpType string) error {
	var fields []any
	if in.DatapathType != dpType {
		in.DatapathType = dpType
		fields = append(fields, &in.DatapathType)
	}
	if in.FailMode == nil || *in.FailMode != "secure" {
		secure := "secure"
		in.FailMode = &secure
		fields = append(fields, &in.FailMode)
	}
	missing := false
	for _, p := range brIntProtocols {
		if !slices.Contains(in.Protocols, p) {
			in.Protocols = append(in.Protocols, p)
			missing = true
		}
	}
	if missing {
		fields = append(fields, &in.Protocols)
	}
	if len(fields) == 0 {
		return nil
	}
	if err := t.add(d.c.Where(in).Update(in, fields...)); err != nil {
		return fmt.Errorf("update bridge %s: %w", in.Name, err)
	}
	return nil
}

// portBridge returns the name of the bridge holding port name, ErrPortNotFound (wrapped) if no
// bridge does.
func (d *DB) portBridge(ctx context.Context, name string) (string, error) {
	p := &portRow{Name: name}
	if err := d.c.Get(ctx, p); err != nil {
		if errors.Is(err, client.ErrNotFound) {
			return "", fmt.Errorf("%s: %w", name, ErrPortNotFound)
		}
		return "", fmt.Errorf("read port %s: %w", name, err)
	}
	var brs []bridgeRow
	if err := d.c.List(ctx, &brs); err != nil {
		return "", fmt.Errorf("list bridges: %w", err)
	}
	for _, b := range brs {
		if slices.Contains(b.Ports, p.UUID) {
			return b.Name, nil
		}
	}
	return "", fmt.Errorf("%s is on no bridge: %w", name, ErrPortNotFound)
}

// ErrUplinkAmbiguous is returned by EnsureIntegration when no uplink is configured and br-ex does
// not have exactly one port that could be it.
var ErrUplinkAmbiguous = errors.New("cannot tell the uplink: set it explicitly (--uplink)")

// findUplink returns the only port of br that can be the uplink: not br's own internal port, not
// an internal or patch interface (our patch port among them), not a tunnel.
func (d *DB) findUplink(ctx context.Context, br *bridgeRow, patch string) (string, error) {
	var cands []string
	for _, pu := range br.Ports {
		p := &portRow{UUID: pu}
		if err := d.c.Get(ctx, p); err != nil {
			return "", fmt.Errorf("read port %s: %w", pu, err)
		}
		if p.Name == br.Name || p.Name == patch || len(p.Interfaces) != 1 {
			continue
		}
		i := &ifaceRow{UUID: p.Interfaces[0]}
		if err := d.c.Get(ctx, i); err != nil {
			return "", fmt.Errorf("read interface of port %s: %w", p.Name, err)
		}
		switch i.Type {
		case "internal", "patch", "geneve", "vxlan", "gre", "stt":
			continue
		}
		if _, secondary := i.ExternalIDs[ExternalIDEgressSubnets]; secondary {
			continue
		}
		cands = append(cands, p.Name)
	}
	if len(cands) != 1 {
		slices.Sort(cands)
		return "", fmt.Errorf("%s has %d candidate uplink ports %v: %w", br.Name, len(cands), cands, ErrUplinkAmbiguous)
	}
	return cands[0], nil
}

// ensurePort adds port name (one interface of the same name) to br, or corrects the type and
// the given options of the existing interface.
func (d *DB) ensurePort(ctx context.Context, t *txn, br *bridgeRow, brIsNew bool, name, typ string, opts map[string]string) error {
	iface := &ifaceRow{Name: name}
	err := d.c.Get(ctx, iface)
	if errors.Is(err, client.ErrNotFound) {
		return d.createPort(t, br, brIsNew, name, typ, opts)
	}
	if err != nil {
		return fmt.Errorf("read interface %s: %w", name, err)
	}
	if got, err := d.portBridge(ctx, name); err != nil {
		return err
	} else if got != br.Name {
		return fmt.Errorf("port %s is on bridge %s, want %s", name, got, br.Name)
	}
	var fields []any
	if iface.Type != typ {
		iface.Type = typ
		fields = append(fields, &iface.Type)
	}
	newOpts := maps.Clone(iface.Options)
	if newOpts == nil {
		newOpts = map[string]string{}
	}
	maps.Copy(newOpts, opts)
	if !maps.Equal(newOpts, iface.Options) {
		iface.Options = newOpts
		fields = append(fields, &iface.Options)
	}
	if len(fields) == 0 {
		return nil
	}
	if err := t.add(d.c.Where(iface).Update(iface, fields...)); err != nil {
		return fmt.Errorf("update interface %s: %w", name, err)
	}
	return nil
}

// createPort adds the operations that create a Port with one Interface, both called name, on
// br. A bridge created in the same transaction (brIsNew) gets the port in its Ports column.
func (d *DB) createPort(t *txn, br *bridgeRow, brIsNew bool, name, typ string, opts map[string]string) error {
	return d.createPortRow(t, br, brIsNew, &ifaceRow{Name: name, Type: typ, Options: opts})
}

// createPortRow is createPort for an interface row with more columns set (its UUID is set here).
func (d *DB) createPortRow(t *txn, br *bridgeRow, brIsNew bool, iface *ifaceRow) error {
	name := iface.Name
	iface.UUID = t.name()
	port := &portRow{UUID: t.name(), Name: name, Interfaces: []string{iface.UUID}}
	if err := t.add(d.c.Create(iface, port)); err != nil {
		return fmt.Errorf("create port %s: %w", name, err)
	}
	if brIsNew {
		br.Ports = append(br.Ports, port.UUID)
		return nil
	}
	if err := t.add(d.c.Where(br).Mutate(br, model.Mutation{
		Field: &br.Ports, Mutator: ovsdb.MutateOperationInsert, Value: []string{port.UUID},
	})); err != nil {
		return fmt.Errorf("add port %s to %s: %w", name, br.Name, err)
	}
	return nil
}

// transact runs t's operations (if any) as one transaction and checks every result.
func (d *DB) transact(ctx context.Context, t *txn) error {
	if len(t.ops) == 0 {
		return nil
	}
	klog.FromContext(ctx).V(9).Info("OVSDB transaction", "operations", t.ops)
	res, err := d.c.Transact(ctx, t.ops...)
	if err != nil {
		return err
	}
	if _, err := ovsdb.CheckOperationResults(res, t.ops); err != nil {
		return err
	}
	return nil
}

// waitPorts polls the cache until the ofports and br-ex's MAC are known.
func (d *DB) waitPorts(ctx context.Context, c IntegrationConfig) (flows.Ports, error) {
	ctx, cancel := context.WithTimeout(ctx, c.PortWait)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var p flows.Ports
		var pending []string
		// causes keeps the errors of this round other than "not there yet", for the timeout error.
		var causes []error
		ofport := func(name string) int {
			i := &ifaceRow{Name: name}
			err := d.c.Get(ctx, i)
			if err != nil && !errors.Is(err, client.ErrNotFound) {
				causes = append(causes, fmt.Errorf("read interface %s: %w", name, err))
			}
			if err != nil || i.OFPort == nil || *i.OFPort <= 0 {
				msg := name
				if err == nil && i.Error != nil {
					msg += " (" + *i.Error + ")"
				}
				pending = append(pending, msg)
				return 0
			}
			return *i.OFPort
		}
		p.ExUplink = ofport(c.Uplink)
		p.ExPatch = ofport(c.PatchExToInt)
		p.IntPatch = ofport(c.PatchIntToEx)
		p.IntTunnel = ofport(c.GenevePort)
		p.TunnelUDPPort = c.GeneveUDPPort
		exIf := &ifaceRow{Name: c.BrEx}
		if err := d.c.Get(ctx, exIf); err != nil && !errors.Is(err, client.ErrNotFound) {
			causes = append(causes, fmt.Errorf("read interface %s: %w", c.BrEx, err))
		} else if err == nil && exIf.MACInUse != nil {
			mac, err := net.ParseMAC(*exIf.MACInUse)
			if err != nil {
				causes = append(causes, fmt.Errorf("mac_in_use of %s: %w", c.BrEx, err))
			}
			p.ExMAC = mac
		}
		if p.ExMAC == nil {
			pending = append(pending, c.BrEx+" mac_in_use")
		}
		sec, secPending, err := d.secondaryUplinks(ctx, c.BrEx)
		if err != nil {
			causes = append(causes, err)
		}
		p.Secondary = sec
		pending = append(pending, secPending...)
		if len(pending) == 0 {
			gw, state, wait := d.gatewayPort(ctx, c)
			if !wait {
				p.IntGateway, p.GatewayMAC = gw.ofport, gw.mac
				if prev, _ := d.gatewayState.Load().(string); prev != state {
					d.gatewayState.Store(state)
					klog.FromContext(ctx).Info(gatewayLog[gw.ofport > 0], "port", c.GatewayPort, "bridge", c.BrInt, "state", state)
				}
				return p, nil
			}
			pending = append(pending, c.GatewayPort)
		}
		select {
		case <-ctx.Done():
			return flows.Ports{}, fmt.Errorf("wait for ofports: still missing %s: %w",
				strings.Join(pending, ", "), errors.Join(append([]error{ctx.Err()}, causes...)...))
		case <-tick.C:
		}
	}
}

// gatewayLog is the log line about the gateway port, by whether it was found.
var gatewayLog = map[bool]string{
	false: "No gateway port on the integration bridge: no host connectivity for pods (kubelet probes, ClusterIPs, the outside world) until the node set-up step creates it",
	true:  "Found the gateway port: host connectivity for pods",
}

type gatewayFacts struct {
	ofport int
	mac    net.HardwareAddr
}

// gatewayPort looks up the optional gateway port: its ofport and Interface.mac_in_use when it is
// an interface of c.BrInt with both; zero facts and a description of why not otherwise. wait is
// true while the port exists but ovs-vswitchd has not yet given it an ofport or a MAC.
func (d *DB) gatewayPort(ctx context.Context, c IntegrationConfig) (gw gatewayFacts, state string, wait bool) {
	if c.GatewayPort == "-" {
		return gw, "disabled", false
	}
	br, err := d.portBridge(ctx, c.GatewayPort)
	if err != nil {
		return gw, "absent", false
	}
	if br != c.BrInt {
		return gw, "on bridge " + br, false
	}
	i := &ifaceRow{Name: c.GatewayPort}
	if err := d.c.Get(ctx, i); err != nil {
		return gw, "no interface", false
	}
	if i.Type != "internal" {
		return gw, "type " + i.Type + ", not internal", false
	}
	if i.OFPort != nil && *i.OFPort < 0 {
		msg := "ofport -1"
		if i.Error != nil {
			msg += " (" + *i.Error + ")"
		}
		return gw, msg, false
	}
	if i.OFPort == nil || *i.OFPort == 0 || i.MACInUse == nil {
		return gw, "", true
	}
	mac, err := net.ParseMAC(*i.MACInUse)
	if err != nil || len(mac) != 6 {
		return gw, "bad mac_in_use " + *i.MACInUse, false
	}
	return gatewayFacts{ofport: *i.OFPort, mac: mac}, fmt.Sprintf("ofport %d, MAC %s", *i.OFPort, mac), false
}

// NameTables names OpenFlow tables of bridge through OVSDB Flow_Table rows (Bridge.flow_tables,
// Flow_Table.name), so that `ovs-ofctl --names dump-flows` prints table=NAME and
// ofproto/trace shows the names. Tables not in names are left alone; rows already carrying the
// right name are not written. names maps table id (0-254) to name. Names must be unique per
// bridge and not look like numbers (ovs-ofctl(8) parses names in flow text when --names is on).
// Errors: ErrBridgeNotFound (wrapped) or the transaction error.
func (d *DB) NameTables(ctx context.Context, bridge string, names map[int]string) error {
	br := &bridgeRow{Name: bridge}
	if err := d.c.Get(ctx, br); err != nil {
		if errors.Is(err, client.ErrNotFound) {
			return fmt.Errorf("%s: %w", bridge, ErrBridgeNotFound)
		}
		return fmt.Errorf("read bridge %s: %w", bridge, err)
	}
	t := &txn{}
	add := map[int]string{}
	for _, id := range slices.Sorted(maps.Keys(names)) {
		name := names[id]
		if id < 0 || id > 254 {
			return fmt.Errorf("name table %d of %s: table id out of range", id, bridge)
		}
		if u, ok := br.FlowTables[id]; ok {
			ft := &flowTableRow{UUID: u}
			err := d.c.Get(ctx, ft)
			if err != nil && !errors.Is(err, client.ErrNotFound) {
				return fmt.Errorf("read Flow_Table %s of %s: %w", u, bridge, err)
			}
			if err == nil {
				if ft.Name != nil && *ft.Name == name {
					continue
				}
				ft.Name = &name
				if err := t.add(d.c.Where(ft).Update(ft, &ft.Name)); err != nil {
					return fmt.Errorf("rename table %d of %s: %w", id, bridge, err)
				}
				continue
			}
		}
		ft := &flowTableRow{UUID: t.name(), Name: &name}
		if err := t.add(d.c.Create(ft)); err != nil {
			return fmt.Errorf("create Flow_Table %s: %w", name, err)
		}
		add[id] = ft.UUID
	}
	if len(add) > 0 {
		if err := t.add(d.c.Where(br).Mutate(br, model.Mutation{
			Field: &br.FlowTables, Mutator: ovsdb.MutateOperationInsert, Value: add,
		})); err != nil {
			return fmt.Errorf("add flow tables to %s: %w", bridge, err)
		}
	}
	if err := d.transact(ctx, t); err != nil {
		return fmt.Errorf("name tables of %s: %w", bridge, err)
	}
	return nil
}

// PodPorts lists the pod interfaces on bridge brInt, sorted by namespace and name. Interfaces
// without a recognised pod identity, without a parseable attached-mac or without an ofport
// (> 0) are skipped; unparseable addresses are skipped. Error: ErrBridgeNotFound (wrapped).
func (d *DB) PodPorts(ctx context.Context, brInt string) ([]flows.PodPort, error) {
	var out []flows.PodPort
	err := d.eachInterface(ctx, brInt, func(_ *portRow, i *ifaceRow) bool {
		if pp, ok := podPort(i); ok {
			out = append(out, pp)
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b flows.PodPort) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Interface, b.Interface)
	})
	return out, nil
}

// eachInterface calls visit with every interface of every port of bridge, in the bridge's port
// order; visit returns true to skip the port's other interfaces. Rows deleted during the walk are
// skipped. Errors: ErrBridgeNotFound (wrapped), or the OVSDB read that failed.
func (d *DB) eachInterface(ctx context.Context, bridge string, visit func(p *portRow, i *ifaceRow) (nextPort bool)) error {
	br := &bridgeRow{Name: bridge}
	if err := d.c.Get(ctx, br); err != nil {
		if errors.Is(err, client.ErrNotFound) {
			return fmt.Errorf("%s: %w", bridge, ErrBridgeNotFound)
		}
		return fmt.Errorf("read bridge %s: %w", bridge, err)
	}
	for _, pu := range br.Ports {
		p := &portRow{UUID: pu}
		if err := d.c.Get(ctx, p); errors.Is(err, client.ErrNotFound) {
			continue // deleted meanwhile
		} else if err != nil {
			return fmt.Errorf("read port %s of %s: %w", pu, bridge, err)
		}
		for _, iu := range p.Interfaces {
			i := &ifaceRow{UUID: iu}
			if err := d.c.Get(ctx, i); errors.Is(err, client.ErrNotFound) {
				continue
			} else if err != nil {
				return fmt.Errorf("read interface %s of port %s: %w", iu, p.Name, err)
			}
			if visit(p, i) {
				break
			}
		}
	}
	return nil
}

// podPort extracts a PodPort from an interface row.
func podPort(i *ifaceRow) (flows.PodPort, bool) {
	ids := i.ExternalIDs
	pp := flows.PodPort{Interface: i.Name}
	var ok bool
	if pp.Namespace, pp.Name, ok = podIdentity(ids); !ok {
		return flows.PodPort{}, false
	}
	if i.OFPort == nil || *i.OFPort <= 0 {
		return flows.PodPort{}, false
	}
	pp.OFPort = *i.OFPort
	mac, err := net.ParseMAC(ids["attached-mac"])
	if err != nil {
		return flows.PodPort{}, false
	}
	pp.MAC = mac
	pp.UID = ids["pod-uid"]
	if pp.UID == "" {
		pp.UID = ids["iface-id-ver"]
	}
	pp.Chained = ids[ExtIDMode] == ModeChained
	if c, err := strconv.ParseUint(ids[ExtIDAgentFlows], 0, 64); err == nil {
		pp.Acked = flows.Cookie(c)
	}
	raw := ids["ip_addresses"]
	if raw == "" {
		raw = ids["ip"]
	}
	for _, s := range strings.Split(raw, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if pfx, err := netip.ParsePrefix(s); err == nil {
			pp.IPs = append(pp.IPs, pfx.Addr())
		} else if a, err := netip.ParseAddr(s); err == nil {
			pp.IPs = append(pp.IPs, a)
		}
	}
	return pp, true
}
