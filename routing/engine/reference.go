package engine

import _ "embed"

//go:embed reference-13.json
var referenceJSON []byte

// ReferenceJSON returns the embedded copy of the reference 13-instance
// cluster file (data/clusters/reference-13.json), for the demo and for tests
// that must run without the shared data folder.
func ReferenceJSON() []byte { return append([]byte(nil), referenceJSON...) }

// ReferenceCluster parses the embedded reference cluster file.
func ReferenceCluster() *ClusterFile {
	f, err := ParseCluster(referenceJSON)
	if err != nil {
		// The file is embedded and covered by tests; failing here is a
		// build defect, not a runtime condition.
		panic("engine: embedded reference cluster is invalid: " + err.Error())
	}
	return f
}
