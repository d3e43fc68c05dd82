package flows

// BuildExBase returns the static br-ex pipeline (KindExBase).
func BuildExBase(st *State) (*FlowSet, error) {
	fs := &FlowSet{Key: Key{Kind: KindExBase}, Bridge: BrEx}
	return fs, fs.Finish()
}

// BuildIntBase returns the static br-int pipeline (KindIntBase).
func BuildIntBase(st *State) (*FlowSet, error) {
	fs := &FlowSet{Key: Key{Kind: KindIntBase}, Bridge: BrInt}
	return fs, fs.Finish()
}

// BuildNode returns the Geneve route of another node's pod CIDRs (KindNode) on br-int.
func BuildNode(st *State, n Node) (*FlowSet, error) {
	fs := &FlowSet{Key: Key{Kind: KindNode, Name: n.Name}, Bridge: BrInt}
	return fs, fs.Finish()
}

// BuildPod returns a local pod's flows (KindPod) on br-int.
func BuildPod(st *State, p Pod) (*FlowSet, error) {
	fs := &FlowSet{Key: Key{Kind: KindPod, Namespace: p.Namespace, Name: p.Name}, Bridge: BrInt}
	return fs, fs.Finish()
}

// BuildServicePort returns an opted-in Service port's flows and select group (KindServicePort)
// on br-ex.
func BuildServicePort(st *State, sp *ServicePort) (*FlowSet, error) {
	fs := &FlowSet{Key: sp.Key(), Bridge: BrEx}
	return fs, fs.Finish()
}
