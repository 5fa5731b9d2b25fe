package simulator

import (
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/taskscope/taskscope/internal/hadoop"
)

// The NodeManager REST API (NMWebServices), the parts an agent uses:
//
//	GET /ws/v1/node/info
//	GET /ws/v1/node/containers          {"containers":{"container":[{...}]}}
//	GET /ws/v1/node/containers/{id}     {"container":{...}}
//	GET /ws/v1/node/apps                {"apps":{"app":[{...}]}}
//
// A container is listed from its launch until a moment after it has
// exited (COMPLETE, with its exitCode and diagnostics: completedKeep).
// exitCode is -1000 (INVALID) while it runs, the kill's ContainerExitStatus
// once it is being killed for a reason.

type nmContainerInfo struct {
	ID                  string   `json:"id"`
	State               string   `json:"state"`
	ExitCode            int      `json:"exitCode"`
	Diagnostics         string   `json:"diagnostics"`
	User                string   `json:"user"`
	TotalMemoryNeededMB int64    `json:"totalMemoryNeededMB"`
	TotalVCoresNeeded   int64    `json:"totalVCoresNeeded"`
	ContainerLogsLink   string   `json:"containerLogsLink"`
	NodeID              string   `json:"nodeId"`
	ContainerLogFiles   []string `json:"containerLogFiles"`
	ExecutionType       string   `json:"executionType"`
}

type nmAppInfo struct {
	ID           string   `json:"id"`
	State        string   `json:"state"`
	User         string   `json:"user"`
	ContainerIDs []string `json:"containerids,omitempty"`
}

func (nm *nodeManager) webServer() *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws/v1/node/info", nm.serveInfo)
	mux.HandleFunc("GET /ws/v1/node", nm.serveInfo)
	mux.HandleFunc("GET /ws/v1/node/containers", nm.serveContainers)
	mux.HandleFunc("GET /ws/v1/node/containers/{id}", nm.serveContainer)
	mux.HandleFunc("GET /ws/v1/node/apps", nm.serveApps)
	return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func (nm *nodeManager) containerInfos() []nmContainerInfo {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	out := make([]nmContainerInfo, 0, len(nm.containers))
	for _, ct := range nm.containers {
		out = append(out, nm.info(ct))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (nm *nodeManager) info(ct *nmContainer) nmContainerInfo {
	r := ct.req
	state := ct.state
	if state == "LOCALIZED" {
		state = "LOCALIZING"
	}
	code := yarnInvalid
	switch {
	case ct.done:
		code = ct.exitStatus
	case ct.killStatus != 0:
		code = ct.killStatus
	}
	return nmContainerInfo{
		ID: r.ContainerID, State: state, ExitCode: code, Diagnostics: ct.diag, User: r.User,
		TotalMemoryNeededMB: int64(r.MemoryMB), TotalVCoresNeeded: int64(max(r.VCores, 1)),
		ContainerLogsLink: nm.scheme + "://" + nm.webAddr + "/node/containerlogs/" + r.ContainerID + "/" + r.User,
		NodeID:            nm.host + ":" + strconv.Itoa(nm.nmPort),
		ContainerLogFiles: []string{"prelaunch.out", "prelaunch.err", "stdout", "stderr", "syslog"},
		ExecutionType:     "GUARANTEED",
	}
}

func (nm *nodeManager) serveContainers(w http.ResponseWriter, r *http.Request) {
	list := nm.containerInfos()
	if len(list) == 0 {
		writeJSON(w, http.StatusOK, map[string]any{"containers": map[string]any{}})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"containers": map[string]any{"container": list}})
}

func (nm *nodeManager) serveContainer(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	nm.mu.Lock()
	ct := nm.containers[id]
	var info nmContainerInfo
	if ct != nil {
		info = nm.info(ct)
	}
	nm.mu.Unlock()
	if ct == nil {
		writeJSON(w, http.StatusNotFound, map[string]any{"RemoteException": map[string]string{
			"exception": "NotFoundException", "message": "java.lang.Exception: container with id, " + id + ", not found",
			"javaClassName": "org.apache.hadoop.yarn.webapp.NotFoundException"}})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"container": info})
}

func (nm *nodeManager) serveApps(w http.ResponseWriter, r *http.Request) {
	apps := map[string]*nmAppInfo{}
	for _, c := range nm.containerInfos() {
		cid, ok := hadoop.FindContainer(c.ID)
		if !ok {
			continue
		}
		app := cid.AppID()
		a := apps[app]
		if a == nil {
			a = &nmAppInfo{ID: app, State: "RUNNING", User: c.User}
			apps[app] = a
		}
		a.ContainerIDs = append(a.ContainerIDs, c.ID)
	}
	if len(apps) == 0 {
		writeJSON(w, http.StatusOK, map[string]any{"apps": map[string]any{}})
		return
	}
	list := make([]*nmAppInfo, 0, len(apps))
	for _, k := range sortedKeys(apps) {
		list = append(list, apps[k])
	}
	writeJSON(w, http.StatusOK, map[string]any{"apps": map[string]any{"app": list}})
}

func (nm *nodeManager) serveInfo(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"nodeInfo": map[string]any{
		"id": nm.host + ":" + strconv.Itoa(nm.nmPort), "nodeHostName": nm.host, "nodeHealthy": true,
		"nodeManagerVersion": "3.3.6", "hadoopVersion": "3.3.6", "healthReport": "",
		"totalVmemAllocatedContainersMB": 0, "totalPmemAllocatedContainersMB": 0,
	}})
}
