package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"github.com/routebalance/routebalance/routing/sim"
	"github.com/routebalance/routebalance/routing/sim/plots"
)

func main() {
	b, err := os.ReadFile(os.Args[1])
	if err != nil {
		panic(err)
	}
	var rep sim.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		panic(err)
	}
	rate, _ := strconv.ParseFloat(os.Args[3], 64)
	names, err := plots.Write(os.Args[2], rep.Cells, rate)
	fmt.Println(names, err)
}
