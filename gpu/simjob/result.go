package simjob

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// Result is what --result writes: the same seed always gives the same values.
type Result struct {
	Seed   int64     `json:"seed"`
	Values []float64 `json:"values"`
	Sum    float64   `json:"sum"`
}

// ResultFor computes the result of a job run with seed.
func ResultFor(seed int64) Result {
	r := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	res := Result{Seed: seed, Values: make([]float64, 8)}
	for i := range res.Values {
		res.Values[i] = r.Float64()
		res.Sum += res.Values[i]
	}
	return res
}

func writeResult(path string, seed int64) error {
	data, err := json.MarshalIndent(ResultFor(seed), "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
