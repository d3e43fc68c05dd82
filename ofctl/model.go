package ofctl

// Minimal hand-written libovsdb models of the Open_vSwitch database (ovs-vswitchd.conf.db(5)).
// libovsdb maps a struct to a table through `ovsdb:"column"` tags; a model may carry any subset
// of the table's columns (the client validates the subset against the server's schema when it
// connects). Column types follow libovsdb's mapping: an optional column (min 0, max 1) is a
// pointer, a set a slice, a map a map, a reference a UUID string.

// Table names of the Open_vSwitch database.
const (
	tableOpenVSwitch = "Open_vSwitch"
	tableBridge      = "Bridge"
	tablePort        = "Port"
	tableInterface   = "Interface"
	tableFlowTable   = "Flow_Table"
)

// ovsRow is the Open_vSwitch table's single root row.
type ovsRow struct {
	UUID    string   `ovsdb:"_uuid"`
	Bridges []string `ovsdb:"bridges"`
}

// bridgeRow is a row of the Bridge table.
type bridgeRow struct {
	UUID         string `ovsdb:"_uuid"`
	Name         string `ovsdb:"name"`
	DatapathType string `ovsdb:"datapath_type"`
	// FailMode is "secure", "standalone" or unset.
	FailMode  *string  `ovsdb:"fail_mode"`
	Protocols []string `ovsdb:"protocols"`
	Ports     []string `ovsdb:"ports"`
	// FlowTables maps an OpenFlow table id to a Flow_Table row.
	FlowTables map[int]string `ovsdb:"flow_tables"`
	// OtherConfig holds hwaddr (the bridge's MAC, set by the node set-up step on br-ex).
	OtherConfig map[string]string `ovsdb:"other_config"`
}

// portRow is a row of the Port table.
type portRow struct {
	UUID       string   `ovsdb:"_uuid"`
	Name       string   `ovsdb:"name"`
	Interfaces []string `ovsdb:"interfaces"`
	// Tag is the port's access VLAN for the NORMAL action (node-setup isolates a secondary
	// uplink with SecondaryUplinkTag).
	Tag *int `ovsdb:"tag"`
}

// ifaceRow is a row of the Interface table.
type ifaceRow struct {
	UUID string `ovsdb:"_uuid"`
	Name string `ovsdb:"name"`
	Type string `ovsdb:"type"`
	// Options holds type-specific options (peer for patch, remote_ip/key/dst_port for geneve).
	Options     map[string]string `ovsdb:"options"`
	ExternalIDs map[string]string `ovsdb:"external_ids"`
	// OFPort is set by ovs-vswitchd: >0 once the port is in the bridge, -1 on failure.
	OFPort   *int    `ovsdb:"ofport"`
	MACInUse *string `ovsdb:"mac_in_use"`
	// Error is ovs-vswitchd's explanation of a port that could not be added.
	Error *string `ovsdb:"error"`
	// MTURequest is the MTU ovs-vswitchd gives the interface (the node set-up step sets it on
	// the gateway port).
	MTURequest *int `ovsdb:"mtu_request"`
}

// flowTableRow is a row of the Flow_Table table.
type flowTableRow struct {
	UUID string  `ovsdb:"_uuid"`
	Name *string `ovsdb:"name"`
}
