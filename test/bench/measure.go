package main

import (
	"log"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

func n(full, small int) int {
	if *quick {
		return small
	}
	return full
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func pct(ds []time.Duration, q float64) float64 {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return math.NaN()
	}
	return ms(s[int(math.Round(q*float64(len(s)-1)))])
}

// benchJSONL spawns `jailcell json` and times `x += 1` over its pipes.
func benchJSONL(dir string) {
	log.Print("JSON-lines round trip")
	j := startJSONL(dir, "j", stack)
	defer j.stop()
	out, _ := j.call(map[string]any{"op": "create"})
	id := out["session"].(string)
	j.call(map[string]any{"op": "exec", "session": id, "code": "x = 0"})
	var ds []time.Duration
	for i := 0; i < n(3000, 300); i++ {
		_, dur := j.call(map[string]any{"op": "exec", "session": id, "code": "x += 1"})
		ds = append(ds, dur)
	}
	res.Raw["jsonl_rt_p50_ms"] = pct(ds, 0.5)
	res.Raw["jsonl_rt_p99_ms"] = pct(ds, 0.99)
}

// benchPool: creates from a warm pool, the first pandas cell, 20 at once.
func benchPool(dir string) {
	log.Print("warm pool: waiting for 20 members")
	s := startServer(dir, "p", stack, 20)
	defer s.stop()
	waitFull := func() {
		select {
		case <-s.poolFull:
		case <-time.After(5 * time.Minute):
			fatal("pool did not fill in 5 min")
		}
	}
	waitFull()
	var creates, pandas []time.Duration
	var ids []string
	for i := 0; i < n(15, 4); i++ {
		id, d := s.create()
		creates = append(creates, d)
		ids = append(ids, id)
		pandas = append(pandas, s.exec(id, "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\nint(df.a.sum())"))
		waitFull()
	}
	for _, id := range ids {
		s.close(id)
	}
	res.Raw["pool_create_p50_ms"] = pct(creates, 0.5)
	res.Raw["pool_create_p99_ms"] = pct(creates, 0.99)
	res.Raw["first_pandas_cell_p50_ms"] = pct(pandas, 0.5)

	log.Print("20 concurrent creates from a full pool of 20")
	time.Sleep(time.Second)
	for len(s.poolFull) > 0 {
		<-s.poolFull
	}
	ids = concurrentCreates(s, 20, "pool20_all_ready_ms")
	// Idle preloaded sessions: their cgroup charge.
	time.Sleep(2 * time.Second)
	idleMemory(s, ids, "")
}

func concurrentCreates(s *server, k int, key string) []string {
	ids := make([]string, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	t := time.Now()
	for i := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i], _, errs[i] = s.tryCreate()
		}()
	}
	wg.Wait()
	res.Raw[key] = ms(time.Since(t))
	var ok []string
	failed := 0
	for i, err := range errs {
		if err != nil {
			failed++
			if failed == 1 {
				log.Printf("%s: %v", key, err)
			}
			continue
		}
		ok = append(ok, ids[i])
	}
	res.Raw[key+"_failed"] = float64(failed)
	if failed > 0 {
		log.Printf("%s: %d of %d creates failed", key, failed, k)
	}
	return ok
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// benchSocket: round trips and throughput over the Unix socket, daemon RSS,
// 100 concurrent cold creates.
func benchSocket(dir string) {
	log.Print("Unix socket round trip")
	s := startServer(dir, "s", stack, 0)
	defer s.stop()
	time.Sleep(time.Second)
	res.Raw["daemon_rss_0_mb"] = s.rss() / 1e6
	id, _ := s.create()
	s.exec(id, "x = 0")
	var ds []time.Duration
	for i := 0; i < n(3000, 300); i++ {
		ds = append(ds, s.exec(id, "x += 1"))
	}
	res.Raw["socket_rt_p50_ms"] = pct(ds, 0.5)
	res.Raw["socket_rt_p99_ms"] = pct(ds, 0.99)
	s.close(id)

	log.Print("throughput: 16 sessions")
	ids := concurrentCreates(s, 16, "create16_cold_ms")
	for _, id := range ids {
		s.exec(id, "x = 0")
	}
	var cells atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(time.Duration(n(5, 2)) * time.Second)
	t := time.Now()
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				s.exec(id, "x += 1")
				cells.Add(1)
			}
		}()
	}
	wg.Wait()
	res.Raw["cells_per_s_16"] = float64(cells.Load()) / time.Since(t).Seconds()
	for _, id := range ids {
		s.close(id)
	}

	k := n(100, 20)
	log.Printf("%d concurrent cold creates (preload %v)", k, stack)
	ids = concurrentCreates(s, k, "create100_cold_ms")
	time.Sleep(2 * time.Second)
	res.Raw["daemon_rss_100_mb"] = s.rss() / 1e6
	idleMemory(s, ids, "_100")
}

// idleMemory records the median cgroup charge (and its anonymous part) of
// the idle sessions ids under keys ending in suffix, then closes them.
func idleMemory(s *server, ids []string, suffix string) {
	var tot, anon []float64
	for _, id := range ids {
		if t, a, ok := s.sessionMemory(id); ok {
			tot, anon = append(tot, t), append(anon, a)
		}
	}
	// MB = 10^6 bytes, as every memory figure of the bench.
	res.Raw["idle_session_cgroup_mb"+suffix] = median(tot) / 1e6
	res.Raw["idle_session_anon_mb"+suffix] = median(anon) / 1e6
	for _, id := range ids {
		s.close(id)
	}
}

// benchCold: cold creates with and without the preload, one-shot cells.
func benchCold(dir string) {
	log.Print("cold creates")
	for _, c := range []struct {
		name    string
		preload []string
	}{{"cold_bare", nil}, {"cold_stack", stack}} {
		s := startServer(dir, c.name[5:], c.preload, 0)
		var ds, once []time.Duration
		for i := 0; i < n(15, 3); i++ {
			id, d := s.create()
			ds = append(ds, d)
			s.close(id)
		}
		res.Raw[c.name+"_create_p50_ms"] = pct(ds, 0.5)
		if c.preload == nil {
			for i := 0; i < n(15, 3); i++ {
				t := time.Now()
				out, err := s.call("POST", "/v1/exec", map[string]any{"code": "pass"})
				if err != nil || status(out) != "ok" {
					fatal("one-shot: %v %v", err, out)
				}
				once = append(once, time.Since(t))
			}
			res.Raw["oneshot_pass_p50_ms"] = pct(once, 0.5)
		}
		s.stop()
	}
}
