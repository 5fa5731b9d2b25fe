package analysis

import (
	"cmp"
	"container/heap"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/taskscope/taskscope/internal/hadoop"
	"github.com/taskscope/taskscope/internal/store"
)

// Path is what set a job's duration: the chain of attempts that did
// (critical path), the waves of each task type, and what-ifs replayed
// through a slot simulator.
type Path struct {
	Start    store.Time `json:"start"`
	End      store.Time `json:"end"`
	Duration float64    `json:"duration_s"`
	Steps    []Step     `json:"steps"`
	Waves    []Waves    `json:"waves"`
	WhatIf   []WhatIf   `json:"what_if"`
}

// Step is one attempt on the critical path, with what its processes did.
type Step struct {
	AttemptID string     `json:"attempt_id"`
	Type      string     `json:"type"`
	Host      string     `json:"host"`
	Start     store.Time `json:"start"`
	End       store.Time `json:"end"`
	Wave      int        `json:"wave"`
	// Gap is the time from the previous step's end to this one's start
	// (waiting for a container), in s; negative when this one started
	// before its predecessor ended (a reduce that started early and
	// waited for the last map: Shuffle is that overlap).
	Gap            float64 `json:"gap_s"`
	Shuffle        float64 `json:"shuffle_wait_s,omitempty"`
	Duration       float64 `json:"duration_s"`
	CPUShare       float64 `json:"cpu_percent"`        // CPU over wall time (100: one core)
	GCShare        float64 `json:"gc_percent"`         // gcShare
	SchedWaitShare float64 `json:"sched_wait_percent"` // waiting for a CPU over wall time
	OffCPUShare    float64 `json:"off_cpu_percent"`    // neither on a CPU nor waiting for one
	ReadBytes      int64   `json:"read_bytes"`
	WriteBytes     int64   `json:"write_bytes"`
	PeakRSS        int64   `json:"peak_rss_bytes"`
	Cause          string  `json:"cause,omitempty"` // its outlier finding's main cause
	Note           string  `json:"note"`
}

// Waves is how a task type's attempts (a Tez vertex's) ran in waves of
// its containers.
type Waves struct {
	TaskType string `json:"task_type"`
	Vertex   string `json:"vertex,omitempty"` // Tez: the vertex (of its DAG)
	Attempts int    `json:"attempts"`
	// Slots is the most attempts of the type that ran at once: the
	// containers it had; Cores the most virtual cores they held at once
	// (store.Attempt's VCores, one a container where not known).
	Slots          int        `json:"slots"`
	Cores          int64      `json:"cores"`
	Waves          int        `json:"waves"`
	LastWave       int        `json:"last_wave_attempts"`
	LastWaveFill   float64    `json:"last_wave_fill_percent"`
	LastWaveStart  store.Time `json:"last_wave_start"`
	End            store.Time `json:"end"`
	MedianDuration float64    `json:"median_duration_s"`
	// Kind is what the last wave was: "full", "partial" (badly filled:
	// slots idle while a few ran) or "straggler" (one slow attempt).
	Kind string `json:"last_wave_kind"`
	// IdleShare is the share of the type's core time (its containers'
	// cores over time) left idle in its last wave (percent).
	IdleShare float64 `json:"idle_percent"`
}

// WhatIf is the job's end had something been different, replayed through
// the slot simulator with the measured durations.
type WhatIf struct {
	Kind       string     `json:"kind"` // without_attempt | more_containers
	AttemptID  string     `json:"attempt_id,omitempty"`
	TaskType   string     `json:"task_type,omitempty"`
	Containers int        `json:"containers,omitempty"` // more containers of TaskType
	End        store.Time `json:"end"`
	Saved      float64    `json:"saved_s"`
	Text       string     `json:"text"`
}

// maxSteps bounds the critical path.
const maxSteps = 200

// criticalPath is the job's Path: nil for a job without task attempts.
func (j *Job) criticalPath() *Path {
	var atts []store.Attempt
	for _, a := range j.AttemptList {
		if isTask(a) && a.Start > 0 {
			atts = append(atts, a)
		}
	}
	if len(atts) == 0 {
		return nil
	}
	start, end := int64(math.MaxInt64), int64(0)
	for _, a := range atts {
		f, t := span(a)
		start, end = min(start, f), max(end, t-1)
	}
	p := &Path{Start: store.Time(start), End: store.Time(end), Duration: float64(end-start) / 1000, Steps: []Step{}}
	waves := map[string]int{} // wave of each attempt
	for _, ws := range j.waves() {
		w := ws.w
		w.Vertex = ws.g.vertex
		for id, n := range ws.of {
			waves[id] = n
		}
		p.Waves = append(p.Waves, w)
	}
	if p.Waves == nil {
		p.Waves = []Waves{}
	}
	causes := map[string]string{}
	for _, o := range findOutliers(j) {
		causes[o.a.AttemptID] = ""
	}
	if len(causes) > 0 {
		for _, f := range outliers(j) {
			causes[f.AttemptIDs[0]] = f.Cause
		}
	}
	for _, a := range criticalChain(atts) {
		p.Steps = append(p.Steps, stepOf(a, waves[a.AttemptID], causes[a.AttemptID]))
	}
	for i := 1; i < len(p.Steps); i++ {
		s, prev := &p.Steps[i], p.Steps[i-1]
		s.Gap = float64(s.Start-prev.End) / 1000
		if s.Gap < 0 {
			s.Shuffle = -s.Gap
		}
	}
	p.WhatIf = whatIfs(j, atts, p)
	return p
}

// waveGroup is the attempts that run in waves together: a task type's, or
// a Tez vertex's (DAG and vertex from the attempt id).
type waveGroup struct {
	typ, vertex string
	atts        []store.Attempt
}

// waveGroups are the job's wave groups in a stable order.
func waveGroups(j *Job) []waveGroup {
	var out []waveGroup
	byType := j.byType()
	for _, typ := range sortedTypes(byType) {
		byVertex := map[string][]store.Attempt{}
		for _, a := range byType[typ] {
			v := ""
			if id, ok := hadoop.ParseAttempt(a.AttemptID); ok && id.Tez {
				v = id.DAG + "/" + id.Vertex
			}
			byVertex[v] = append(byVertex[v], a)
		}
		vs := make([]string, 0, len(byVertex))
		for v := range byVertex {
			vs = append(vs, v)
		}
		sort.Strings(vs)
		for _, v := range vs {
			out = append(out, waveGroup{typ: typ, vertex: v, atts: byVertex[v]})
		}
	}
	return out
}

// sortedRefs is pointers to atts in the order of key, then of their IDs
// (pointers sorted, not copies: a job's 10,000 attempts are megabytes).
func sortedRefs(atts []store.Attempt, key func(*store.Attempt) int64) []*store.Attempt {
	refs := make([]*store.Attempt, len(atts))
	for i := range atts {
		refs[i] = &atts[i]
	}
	slices.SortStableFunc(refs, func(x, y *store.Attempt) int {
		return cmp.Or(cmp.Compare(key(x), key(y)), strings.Compare(x.AttemptID, y.AttemptID))
	})
	return refs
}

// waveSet is a wave group's waves and the wave of each of its attempts
// (wavesOf).
type waveSet struct {
	g  waveGroup
	w  Waves
	of map[string]int
}

// waves are the waves of the job's wave groups, in waveGroups' order
// (made once: the last-wave heuristic and the critical path both look
// at them).
func (j *Job) waves() []waveSet {
	if j.waveSets == nil {
		j.waveSets = []waveSet{}
		for _, g := range waveGroups(j) {
			w, of := wavesOf(g.atts)
			j.waveSets = append(j.waveSets, waveSet{g: g, w: w, of: of})
		}
	}
	return j.waveSets
}

// endOf is when an attempt ended (or was last seen running).
func endOf(a store.Attempt) int64 { _, t := span(a); return t - 1 }

// criticalChain walks back from the attempt that ended last (one that
// succeeded, of those that ended within a second of it): a reduce's
// predecessor is the map that ended last if it ended after the reduce
// started (the reduce waited for it); any other attempt's is the one that
// ended last before it started (it took that one's container, or that one's
// output), within a second; the chain ends at an attempt that nothing
// ended before.
func criticalChain(atts []store.Attempt) []store.Attempt {
	sorted := sortedRefs(atts, func(a *store.Attempt) int64 { return endOf(*a) })
	var lastMap *store.Attempt
	for _, a := range sorted {
		if a.Type == "map" {
			lastMap = a
		}
	}
	// The attempt that ended last; of those that ended together, one
	// whose work counted (a speculative copy killed when the other
	// finished did not set the end).
	last := len(sorted) - 1
	for i := last; i >= 0 && endOf(*sorted[i]) >= endOf(*sorted[last])-1000; i-- {
		if o := sorted[i].Outcome; o != store.OutcomeKilled && o != store.OutcomeFailed {
			last = i
			break
		}
	}
	cur := *sorted[last]
	chain := []store.Attempt{cur}
	seen := map[string]bool{cur.AttemptID: true}
	for len(chain) < maxSteps {
		var pred *store.Attempt
		if cur.Type == "reduce" && lastMap != nil && endOf(*lastMap) > int64(cur.Start) && !seen[lastMap.AttemptID] {
			pred = lastMap
		} else {
			for i := len(sorted) - 1; i >= 0; i-- {
				b := sorted[i]
				if !seen[b.AttemptID] && endOf(*b) <= int64(cur.Start)+1000 && int64(b.Start) < int64(cur.Start) {
					pred = b
					break
				}
			}
		}
		if pred == nil {
			break
		}
		cur = *pred
		seen[cur.AttemptID] = true
		chain = append(chain, cur)
	}
	for l, r := 0, len(chain)-1; l < r; l, r = l+1, r-1 {
		chain[l], chain[r] = chain[r], chain[l]
	}
	return chain
}

// stepOf annotates a critical attempt with what its processes did.
func stepOf(a store.Attempt, wave int, cause string) Step {
	dur := math.Max(float64(a.DurationMs), 1)
	s := Step{AttemptID: a.AttemptID, Type: a.Type, Host: a.Host, Start: a.Start, End: store.Time(endOf(a)), Wave: wave,
		Duration: float64(a.DurationMs) / 1000, CPUShare: float64(a.CPUMs) / dur * 100, GCShare: gcShare(a) * 100,
		SchedWaitShare: float64(max(a.SchedWaitMs, 0)) / dur * 100, OffCPUShare: offCPU(a) / dur * 100,
		ReadBytes: a.ReadBytes, WriteBytes: a.WriteBytes, PeakRSS: a.PeakRSS, Cause: cause}
	parts := []string{fmt.Sprintf("%.0f s", s.Duration), fmt.Sprintf("CPU %.0f%% of a core", s.CPUShare)}
	if s.GCShare >= 1 {
		parts = append(parts, fmt.Sprintf("GC %.0f%%", s.GCShare))
	}
	switch {
	case s.SchedWaitShare > 100: // its threads' waits add up over threads
		parts = append(parts, fmt.Sprintf("waiting for a CPU %.1f threads at once on average", s.SchedWaitShare/100))
	case s.SchedWaitShare >= 1:
		parts = append(parts, fmt.Sprintf("waiting for a CPU %.0f%%", s.SchedWaitShare))
	}
	if s.OffCPUShare >= 10 {
		parts = append(parts, fmt.Sprintf("off a CPU %.0f%%", s.OffCPUShare))
	}
	if a.ReadBytes+a.WriteBytes >= 1<<20 {
		parts = append(parts, fmt.Sprintf("read %d MB, wrote %d MB", a.ReadBytes>>20, a.WriteBytes>>20))
	}
	parts = append(parts, fmt.Sprintf("peak RSS %d MB", a.PeakRSS>>20))
	if cause != "" {
		parts = append(parts, "outlier: "+cause)
	}
	s.Note = strings.Join(parts, ", ")
	return s
}

// wavesOf finds a type's waves: its slots are the most of its attempts
// that ran at once; in start order, each slots attempts are a wave.
func wavesOf(atts []store.Attempt) (Waves, map[string]int) {
	// (Their order found by pointers, and each copied once.)
	order := sortedRefs(atts, func(a *store.Attempt) int64 { return int64(a.Start) })
	sorted := make([]store.Attempt, len(atts))
	for i, a := range order {
		sorted[i] = *a
	}
	slots := int(concurrency(sorted, func(store.Attempt) int64 { return 1 }))
	w := Waves{TaskType: sorted[0].Type, Attempts: len(sorted), Slots: slots, Cores: concurrency(sorted, cores), Kind: "full"}
	of := map[string]int{}
	var d []float64
	for i, a := range sorted {
		of[a.AttemptID] = i/slots + 1
		d = append(d, float64(a.DurationMs))
		w.End = store.Time(max(int64(w.End), endOf(a)))
	}
	med := median(d)
	w.MedianDuration = med / 1000
	w.Waves = (len(sorted) + slots - 1) / slots
	w.LastWave = len(sorted) - (w.Waves-1)*slots
	w.LastWaveFill = float64(w.LastWave) / float64(slots) * 100
	last := sorted[(w.Waves-1)*slots:]
	w.LastWaveStart = last[0].Start
	first := int64(sorted[0].Start)
	spanMs := float64(int64(w.End) - first)
	lastMs := float64(int64(w.End) - int64(w.LastWaveStart))
	if w.Waves >= 2 && spanMs > 0 {
		// The core time of the last wave left idle: cores that ran
		// nothing from the wave's start to the type's end.
		var busy float64
		for _, a := range last {
			busy += float64(endOf(a)-max(int64(a.Start), int64(w.LastWaveStart))) * float64(cores(a))
		}
		w.IdleShare = math.Max(0, float64(w.Cores)*lastMs-busy) / (float64(w.Cores) * spanMs) * 100
		switch {
		case slowest(last) >= 2*med && med > 0:
			w.Kind = "straggler"
		case w.LastWaveFill <= 50 && len(sorted) >= 2*slots:
			// (A few attempts over few containers, a retry after a
			// failure say, are not waves.)
			w.Kind = "partial"
		}
	}
	return w, of
}

// slowest is the longest duration among atts (ms).
func slowest(atts []store.Attempt) float64 {
	m := 0.0
	for _, a := range atts {
		m = math.Max(m, float64(a.DurationMs))
	}
	return m
}

// seenLate is how much later than it ended an attempt may be seen to
// end: its agent sees it gone at a later look, and the attempt that took
// its container may have started (and been seen) meanwhile. (The critical
// path and the slot simulator allow the same second.)
const seenLate = 1000

// concurrency is the most of atts, each weighing weight, that ran at once
// (at least 1); an attempt that started within seenLate before another's
// end (at most half that one's duration) took its container.
func concurrency(atts []store.Attempt, weight func(store.Attempt) int64) int64 {
	type ev struct {
		t int64
		d int64
	}
	var evs []ev
	for _, a := range atts {
		e, n := endOf(a), weight(a)
		evs = append(evs, ev{int64(a.Start), n}, ev{e - min(seenLate, (e-int64(a.Start))/2), -n})
	}
	sort.Slice(evs, func(x, y int) bool {
		if evs[x].t != evs[y].t {
			return evs[x].t < evs[y].t
		}
		return evs[x].d < evs[y].d // an end before a start at the same time
	})
	n, m := int64(0), int64(1)
	for _, e := range evs {
		n += e.d
		m = max(m, n)
	}
	return m
}

// lastWave finds task types whose last wave ran few attempts on many
// containers for a long time: slots idle while the job waited for them.
// A last wave made long by one slow attempt is a straggler's (straggler,
// outlier) and not told here.
func lastWave(j *Job) []Finding {
	var out []Finding
	for _, ws := range j.waves() {
		g, w := ws.g, ws.w
		typ := g.typ
		if w.Kind != "partial" || w.Slots < 2 {
			continue
		}
		sev := grade(w.IdleShare/100, [4]float64{0.1, 0.2, 0.3, 0.45})
		if sev == None {
			continue
		}
		lastSecs := float64(int64(w.End)-int64(w.LastWaveStart)) / 1000
		// As many tasks as fill the waves: the next multiple of the slots
		// below or above.
		down, up := (w.Waves-1)*w.Slots, w.Waves*w.Slots
		f := Finding{Severity: sev, TaskType: typ, AttemptIDs: []string{},
			Message: fmt.Sprintf("The last of %d waves of %s attempts ran %d attempts on %d containers (%.0f%% full) for %.0f s: %.0f%% of the %s containers' core time (%d cores) went idle. %d attempts of a median %.0f s fill %d waves exactly with %d or %d attempts.",
				w.Waves, typ, w.LastWave, w.Slots, w.LastWaveFill, lastSecs, w.IdleShare, typ, w.Cores, w.Attempts, w.MedianDuration,
				w.Waves-1, down, up),
			Numbers: []Number{{"waves", float64(w.Waves), "count"}, {"slots", float64(w.Slots), "count"},
				{"cores", float64(w.Cores), "count"},
				{"last_wave_attempts", float64(w.LastWave), "count"}, {"last_wave_fill", w.LastWaveFill, "percent"},
				{"idle_share", w.IdleShare, "percent"}, {"last_wave_time", lastSecs, "s"}}}
		if g.vertex != "" {
			f.Message = "Tez vertex " + g.vertex + ": " + f.Message
		}
		for _, a := range g.atts {
			if a.Start >= w.LastWaveStart {
				f.AttemptIDs = append(f.AttemptIDs, a.AttemptID)
			}
		}
		sort.Strings(f.AttemptIDs)
		if typ == "reduce" {
			f.Recommendation = fmt.Sprintf("Use a number of reduces that fills the waves: %d (one wave fewer) or %d.", down, up)
			f.Parameter, f.Value = "mapreduce.job.reduces", fmt.Sprint(down)
			if down == 0 {
				f.Value = fmt.Sprint(up)
			}
		} else {
			f.Recommendation = fmt.Sprintf("Make the input split into a number of tasks that fills the waves (%d or %d): a larger split size gives fewer, longer tasks; or give the job more containers.", down, up)
			f.Parameter = "mapreduce.input.fileinputformat.split.minsize"
		}
		out = append(out, f)
	}
	return out
}

// sim replays a job's attempts through containers: each task type has
// its slots; an attempt starts when it is ready and a slot is free, and
// runs its duration. An attempt is ready when it started, unless it
// started when an attempt of its type ended (it waited for that slot):
// then it is ready when its type began. A retry starts after the attempt
// it retries ends, a speculative copy as long after its original as it
// did. A reduce that started before the last map ended (slow start) ends
// what it ran after the last map (the rest of its shuffle, merge, reduce)
// after the maps' end; one that started after it starts when the maps end.
type sim struct {
	atts   []store.Attempt
	byType map[string][]int // indexes in start order
	ready  []int64
	tail   []int64 // reduces: what ran after the last map
	after  []int   // a retry: the attempt it follows (-1: none)
	copyOf []int   // a speculative copy: its original (-1: none) ...
	offset []int64 // ... and how long after the original it started
}

func newSim(atts []store.Attempt) *sim {
	s := &sim{atts: atts, byType: map[string][]int{}, ready: make([]int64, len(atts)), tail: make([]int64, len(atts)),
		after: make([]int, len(atts)), copyOf: make([]int, len(atts)), offset: make([]int64, len(atts))}
	idx := make([]int, len(atts))
	byID := map[string]int{}
	for i := range idx {
		idx[i] = i
		byID[atts[i].AttemptID] = i
	}
	for i, a := range atts {
		s.after[i], s.copyOf[i] = -1, -1
		if k, ok := byID[a.RetryOf]; ok && a.RetryOf != "" {
			if a.Speculative {
				s.copyOf[i], s.offset[i] = k, int64(a.Start-atts[k].Start)
			} else {
				s.after[i] = k
			}
		}
	}
	sort.SliceStable(idx, func(x, y int) bool { return atts[idx[x]].Start < atts[idx[y]].Start })
	lastMap := int64(0)
	for _, i := range idx {
		s.byType[atts[i].Type] = append(s.byType[atts[i].Type], i)
		if atts[i].Type == "map" {
			lastMap = max(lastMap, endOf(atts[i]))
		}
	}
	for _, ids := range s.byType {
		first := int64(atts[ids[0]].Start)
		// The ends of the type's attempts, in order: whether one other
		// ended in the second before an attempt started is two binary
		// searches, not a look at every attempt of its type (a job of
		// 10,000 attempts took 40 M looks).
		ends := make([]int64, len(ids))
		for k, i := range ids {
			ends[k] = endOf(atts[i])
		}
		slices.Sort(ends)
		for _, i := range ids {
			st := int64(atts[i].Start)
			s.ready[i] = st
			n := sort.Search(len(ends), func(k int) bool { return ends[k] > st }) -
				sort.Search(len(ends), func(k int) bool { return ends[k] >= st-1000 })
			if e := endOf(atts[i]); e <= st && e >= st-1000 {
				n-- // (its own end)
			}
			if n > 0 {
				s.ready[i] = first // it took a freed slot
			}
			if atts[i].Type == "reduce" && lastMap > 0 {
				s.tail[i] = endOf(atts[i]) - max(int64(atts[i].Start), lastMap)
				if int64(atts[i].Start) >= lastMap-1000 {
					s.ready[i] = 0 // it waited for the maps: it starts when they end
				}
			}
		}
	}
	return s
}

type freeSlots []int64

func (h freeSlots) Len() int           { return len(h) }
func (h freeSlots) Less(i, j int) bool { return h[i] < h[j] }
func (h freeSlots) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *freeSlots) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *freeSlots) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// run is the job's end with the given slots per type and durations (ms,
// by index).
func (s *sim) run(slots map[string]int, dur []int64) int64 {
	end := int64(0)
	mapEnd := int64(0)
	simStart, simEnd := make([]int64, len(s.atts)), make([]int64, len(s.atts))
	order := make([]string, 0, len(s.byType))
	for t := range s.byType {
		order = append(order, t)
	}
	sort.Slice(order, func(x, y int) bool { // maps before the rest
		if (order[x] == "map") != (order[y] == "map") {
			return order[x] == "map"
		}
		return order[x] < order[y]
	})
	for _, typ := range order {
		ids := s.byType[typ]
		h := &freeSlots{}
		for k := 0; k < max(slots[typ], 1); k++ {
			heap.Push(h, int64(0))
		}
		for _, i := range ids {
			free := heap.Pop(h).(int64)
			st := max(free, s.ready[i])
			if k := s.after[i]; k >= 0 {
				st = max(st, simEnd[k]) // a retry starts after what it retries
			}
			if k := s.copyOf[i]; k >= 0 {
				st = max(st, simStart[k]+s.offset[i])
			}
			e := st + dur[i]
			if typ == "reduce" && mapEnd > 0 {
				// What it ran before the last map ended was mostly
				// waiting for maps: it ends its tail after them.
				e = max(st, mapEnd) + min(s.tail[i], dur[i])
			}
			simStart[i], simEnd[i] = st, e
			heap.Push(h, e)
			end = max(end, e)
			if typ == "map" {
				mapEnd = max(mapEnd, e)
			}
		}
	}
	return end
}

// whatIfs replays the job: without each slow attempt of the critical path
// (it takes its type's median), and with more containers for each type
// that ran in several waves. The simulator's own end is the baseline: a
// what-if's end is the job's measured end moved by what it changes.
func whatIfs(j *Job, atts []store.Attempt, p *Path) []WhatIf {
	s := newSim(atts)
	slots := map[string]int{}
	for _, w := range p.Waves {
		slots[w.TaskType] = max(slots[w.TaskType], w.Slots) // Tez: its vertices' most
	}
	dur := make([]int64, len(atts))
	for i, a := range atts {
		dur[i] = endOf(a) - int64(a.Start)
	}
	base := s.run(slots, dur)
	out := []WhatIf{}
	at := func(simEnd int64) (store.Time, float64) {
		e := int64(p.End) + simEnd - base
		return store.Time(e), float64(int64(p.End)-e) / 1000
	}
	idx := map[string]int{}
	for i, a := range atts {
		idx[a.AttemptID] = i
	}
	med := typeMedians(j)
	n := 0
	for _, st := range p.Steps {
		i := idx[st.AttemptID]
		m := med[st.Type].duration
		if n >= 3 || m <= 0 || float64(dur[i]) < 1.5*m {
			continue
		}
		n++
		d := append([]int64(nil), dur...)
		d[i] = int64(m)
		e, saved := at(s.run(slots, d))
		out = append(out, WhatIf{Kind: "without_attempt", AttemptID: st.AttemptID, TaskType: st.Type, End: e, Saved: saved,
			Text: fmt.Sprintf("Had %s taken the median %.0f s of its type instead of %.0f s, the job would have ended %.0f s earlier (%.0f s instead of %.0f s).",
				st.AttemptID, m/1000, float64(dur[i])/1000, saved, p.Duration-saved, p.Duration)})
	}
	asked := map[string]bool{}
	for _, w := range p.Waves {
		if w.Waves < 2 || asked[w.TaskType] {
			continue
		}
		asked[w.TaskType] = true
		w.Slots = slots[w.TaskType]
		for _, more := range []int{max(1, w.Slots/2), w.Slots} {
			if more == max(1, w.Slots/2) && more == w.Slots && len(out) > 0 && out[len(out)-1].TaskType == w.TaskType && out[len(out)-1].Kind == "more_containers" {
				continue // one slot: half and all are one
			}
			sl := map[string]int{}
			for k, v := range slots {
				sl[k] = v
			}
			sl[w.TaskType] += more
			e, saved := at(s.run(sl, dur))
			out = append(out, WhatIf{Kind: "more_containers", TaskType: w.TaskType, Containers: more, End: e, Saved: saved,
				Text: fmt.Sprintf("With %d more %s for the %s attempts (%d instead of %d), the job would have ended %.0f s earlier (%.0f s instead of %.0f s).",
					more, plural(more, "container"), w.TaskType, w.Slots+more, w.Slots, saved, p.Duration-saved, p.Duration)})
		}
	}
	return out
}

// plural is n's noun.
func plural(n int, noun string) string {
	if n == 1 {
		return noun
	}
	return noun + "s"
}
