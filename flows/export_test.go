package flows

// GoldenCases are the golden scenarios (TestGolden) for the external tests.
func GoldenCases() map[string]*State { return GoldenStates() }

// BigServiceState is the golden state with one TCP Service port of n endpoints.
func BigServiceState(n int) *State {
	sp := webTCP()
	sp.Endpoints = manyEndpoints(n)
	return testState(sp)
}
