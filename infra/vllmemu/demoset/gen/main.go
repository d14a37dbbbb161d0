// Command gen writes demo.jsonl: go generate ./infra/vllmemu/demoset.
package main

import (
	"log"
	"os"

	"github.com/routebalance/routebalance/infra/vllmemu/demoset"
)

func main() {
	if err := os.WriteFile("demo.jsonl", demoset.Encode(demoset.Generate(demoset.Seed)), 0o644); err != nil {
		log.Fatal(err)
	}
}
