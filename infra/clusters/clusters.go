// Package clusters holds the project's own calibrated cluster files: the
// simulated worlds `routebalance simulate` (and anyone else) can load
// without the shared data folder. See README.md for how reference-13 was
// calibrated.
package clusters

import _ "embed"

//go:embed reference-13.json
var reference13 []byte

// Reference13 returns a copy of the calibrated reference 13-instance
// cluster file (JSON, the vllmemu.ClusterFile format).
func Reference13() []byte { return append([]byte(nil), reference13...) }
