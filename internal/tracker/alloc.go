package tracker

// allocation takes the memory and the virtual cores the NodeManager
// allocated to a unit's container (its listing's totalMemoryNeededMB and
// totalVCoresNeeded) as its attempts' size,
// once the container is listed: what the cluster reserved for it,
// whatever its job's configuration says (a Tez vertex's own size, a
// scheduler's rounding up to its minimum allocation). The attempt it runs
// is reported again with it; the next ones start with it (readConf).
func (t *Tracker) allocation(u *unit) {
	if u.allocMB != 0 || u.containerID == "" || u.cur == nil || t.lost == nil {
		return
	}
	nm := t.lost.nm.forLauncher(u.launcherPID)
	if nm == nil {
		return
	}
	last, _ := nm.Latest()
	if last == nil {
		return
	}
	mb := last.Memory[u.containerID]
	if mb <= 0 {
		return
	}
	u.allocMB, u.allocVCores = mb, last.VCores[u.containerID]
	if a := &u.cur.info; a.MemoryMB != mb || u.allocVCores > 0 && a.VCores != u.allocVCores {
		a.MemoryMB = mb
		if u.allocVCores > 0 {
			a.VCores = u.allocVCores
		}
		t.sink.Attempt(a)
	}
}
