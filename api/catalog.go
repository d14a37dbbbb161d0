package api

import (
	"encoding/json"
	"sort"

	"github.com/gofiber/fiber/v2"

	"github.com/routebalance/routebalance/infra/clusters"
)

// catalogGPU is one known GPU type (the form's suggestions; any other
// name is still accepted).
type catalogGPU struct {
	ID       string `json:"id"`
	Label    string `json:"label"`
	MemoryGB int    `json:"memory_gb"`
}

// knownGPUs are the GPU tiers the dashboard suggests: the reference
// cluster's (a100-80g, v100-32g, a30-24g) and the common datacenter and
// workstation cards vLLM serves on, named as <card>-<memory>g like the
// reference cluster names them.
var knownGPUs = []catalogGPU{
	{"h200-141g", "NVIDIA H200 141 GB", 141}, {"h100-80g", "NVIDIA H100 80 GB", 80},
	{"a100-80g", "NVIDIA A100 80 GB", 80}, {"a100-40g", "NVIDIA A100 40 GB", 40},
	{"l40s-48g", "NVIDIA L40S 48 GB", 48}, {"a30-24g", "NVIDIA A30 24 GB", 24},
	{"a10g-24g", "NVIDIA A10G 24 GB", 24}, {"l4-24g", "NVIDIA L4 24 GB", 24},
	{"rtx4090-24g", "NVIDIA RTX 4090 24 GB", 24}, {"v100-32g", "NVIDIA V100 32 GB", 32},
	{"t4-16g", "NVIDIA T4 16 GB", 16}, {"mi300x-192g", "AMD Instinct MI300X 192 GB", 192},
}

// catalogModel is a price (and shape) suggestion for one model on one GPU.
type catalogModel struct {
	Model           string  `json:"model"`
	GPU             string  `json:"gpu"`
	TensorParallel  int     `json:"tensor_parallel"`
	PriceInPerMTok  float64 `json:"price_in_per_mtok"`
	PriceOutPerMTok float64 `json:"price_out_per_mtok"`
	MaxConcurrency  int     `json:"max_concurrency"`
	// Source is "yours" (an instance you registered) or "reference" (the
	// calibrated reference-13 cluster shipped with RouteBalance).
	Source string `json:"source"`
}

type catalogAnswer struct {
	GPUs   []catalogGPU   `json:"gpus"`
	Models []catalogModel `json:"models"`
}

// catalog answers GET /api/v1/catalog: known GPU types and per-model
// price suggestions — the tenant's own registered instances first, then
// the reference cluster's tiers.
func (s *Server) catalog(c *fiber.Ctx) error {
	tenant := tenantOf(c)
	out := catalogAnswer{GPUs: knownGPUs, Models: []catalogModel{}}
	seen := map[string]bool{}
	add := func(m catalogModel) {
		k := m.Model + "@" + m.GPU
		if m.Model == "" || seen[k] {
			return
		}
		seen[k] = true
		out.Models = append(out.Models, m)
	}
	cls, err := s.deps.Tenants.Clusters(c.UserContext(), tenant)
	if err != nil {
		return err
	}
	var mine []catalogModel
	for _, cl := range cls {
		insts, err := s.deps.Tenants.Instances(c.UserContext(), tenant, cl.ID)
		if err != nil {
			return err
		}
		for _, in := range insts {
			mine = append(mine, catalogModel{Model: in.Model, GPU: in.GPU, TensorParallel: max(1, in.TensorParallel),
				PriceInPerMTok: in.PriceInPerMTok, PriceOutPerMTok: in.PriceOutPerMTok, MaxConcurrency: in.MaxConcurrency, Source: "yours"})
		}
	}
	sort.SliceStable(mine, func(i, j int) bool { return mine[i].Model < mine[j].Model })
	for _, m := range mine {
		add(m)
	}
	var ref struct {
		Tiers []struct {
			Model           string  `json:"model"`
			GPU             string  `json:"gpu"`
			TensorParallel  int     `json:"tensor_parallel"`
			MaxNumSeqs      int     `json:"max_num_seqs"`
			PriceInPerMTok  float64 `json:"price_in_per_mtok"`
			PriceOutPerMTok float64 `json:"price_out_per_mtok"`
		} `json:"tiers"`
	}
	if err := json.Unmarshal(clusters.Reference13(), &ref); err != nil {
		s.log.Error("catalog: reference cluster unreadable", "err", err)
	}
	for _, t := range ref.Tiers {
		add(catalogModel{Model: t.Model, GPU: t.GPU, TensorParallel: max(1, t.TensorParallel), PriceInPerMTok: t.PriceInPerMTok,
			PriceOutPerMTok: t.PriceOutPerMTok, MaxConcurrency: t.MaxNumSeqs, Source: "reference"})
	}
	return c.JSON(out)
}
