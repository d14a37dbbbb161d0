package routing

import "slices"

// Policy names: what PolicyConfig.Name and Request.Policy may hold. The
// scheduler's registry (routing/schedule) builds each; this is the one
// list of them.
const (
	PolicyRouteBalance  = "routebalance"
	PolicyRoundRobin    = "round-robin"
	PolicyShortestQueue = "shortest-queue"
	PolicyQualityOnly   = "quality-only"
	PolicyThreshold     = "threshold"
	PolicyChimera       = "chimera"
	// PolicyOracle reads true labels and exists only in simulation.
	PolicyOracle = "oracle"
)

// livePolicies are the policies a cluster or a request may select, in
// the order they are documented.
var livePolicies = []string{PolicyRouteBalance, PolicyRoundRobin, PolicyShortestQueue, PolicyQualityOnly, PolicyThreshold, PolicyChimera}

// LivePolicies returns the policies a cluster or a request may select
// (every policy but the oracle), in their documented order.
func LivePolicies() []string { return slices.Clone(livePolicies) }

// IsLivePolicy reports whether name is one of LivePolicies.
func IsLivePolicy(name string) bool { return slices.Contains(livePolicies, name) }
