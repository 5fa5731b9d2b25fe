package hadoop

import "testing"

func TestFindAttempt(t *testing.T) {
	tests := []struct {
		in   string
		ok   bool
		want AttemptID
		job  string
		task string
	}{
		{in: "attempt_1700000000000_0042_m_000003_0", ok: true,
			want: AttemptID{Raw: "attempt_1700000000000_0042_m_000003_0", ClusterTS: "1700000000000", Seq: "0042", Type: "map", Task: "000003"},
			job:  "job_1700000000000_0042", task: "task_1700000000000_0042_m_000003"},
		{in: "attempt_1700000000000_0042_r_000000_12", ok: true,
			want: AttemptID{Raw: "attempt_1700000000000_0042_r_000000_12", ClusterTS: "1700000000000", Seq: "0042", Type: "reduce", Task: "000000", Attempt: 12},
			job:  "job_1700000000000_0042", task: "task_1700000000000_0042_r_000000"},
		{in: "attempt_201401011200_0007_s_000001_0", ok: true,
			want: AttemptID{Raw: "attempt_201401011200_0007_s_000001_0", ClusterTS: "201401011200", Seq: "0007", Type: "setup", Task: "000001"},
			job:  "job_201401011200_0007", task: "task_201401011200_0007_s_000001"},
		{in: "attempt_201401011200_0007_c_000002_1", ok: true,
			want: AttemptID{Raw: "attempt_201401011200_0007_c_000002_1", ClusterTS: "201401011200", Seq: "0007", Type: "cleanup", Task: "000002", Attempt: 1},
			job:  "job_201401011200_0007", task: "task_201401011200_0007_c_000002"},
		{in: "attempt_201401011200_0007_t_000002_0", ok: true,
			want: AttemptID{Raw: "attempt_201401011200_0007_t_000002_0", ClusterTS: "201401011200", Seq: "0007", Type: "task-cleanup", Task: "000002"},
			job:  "job_201401011200_0007", task: "task_201401011200_0007_t_000002"},
		// More than 4 job digits and more than 6 task digits (big clusters).
		{in: "attempt_1700000000000_123456_m_1234567_3", ok: true,
			want: AttemptID{Raw: "attempt_1700000000000_123456_m_1234567_3", ClusterTS: "1700000000000", Seq: "123456", Type: "map", Task: "1234567", Attempt: 3},
			job:  "job_1700000000000_123456", task: "task_1700000000000_123456_m_1234567"},
		// Tez: attempt_<ts>_<app>_<dag>_<vertex>_<task>_<n>
		{in: "syslog_attempt_1700000000000_0200_1_00_000005_0", ok: true,
			want: AttemptID{Raw: "attempt_1700000000000_0200_1_00_000005_0", ClusterTS: "1700000000000", Seq: "0200", Type: "tez", DAG: "1", Vertex: "00", Task: "000005", Tez: true},
			job:  "application_1700000000000_0200", task: "task_1700000000000_0200_1_00_000005"},
		{in: "/logs/syslog_attempt_1700000000000_0200_12_03_000105_2.gz", ok: true,
			want: AttemptID{Raw: "attempt_1700000000000_0200_12_03_000105_2", ClusterTS: "1700000000000", Seq: "0200", Type: "tez", DAG: "12", Vertex: "03", Task: "000105", Attempt: 2, Tez: true},
			job:  "application_1700000000000_0200", task: "task_1700000000000_0200_12_03_000105"},
		// In a path: the first id wins, of either kind.
		{in: "/userlogs/job_201401011200_0007/attempt_201401011200_0007_m_000012_0/../attempt_201401011200_0007_m_000013_0", ok: true,
			want: AttemptID{Raw: "attempt_201401011200_0007_m_000012_0", ClusterTS: "201401011200", Seq: "0007", Type: "map", Task: "000012"},
			job:  "job_201401011200_0007", task: "task_201401011200_0007_m_000012"},
		{in: "attempt_1700000000000_0200_1_00_000005_0 attempt_1700000000000_0042_m_000003_0", ok: true,
			want: AttemptID{Raw: "attempt_1700000000000_0200_1_00_000005_0", ClusterTS: "1700000000000", Seq: "0200", Type: "tez", DAG: "1", Vertex: "00", Task: "000005", Tez: true},
			job:  "application_1700000000000_0200", task: "task_1700000000000_0200_1_00_000005"},
		{in: "", ok: false},
		{in: "attempt_", ok: false},
		{in: "attempt_1700000000000_042_m_000003_0", ok: false},    // job number of 3 digits
		{in: "attempt_1700000000000_0042_x_000003_0", ok: false},   // no such type
		{in: "attempt_1700000000000_0042_m_00003_0", ok: false},    // task of 5 digits
		{in: "attempt_1700000000000_0042_m_000003_", ok: false},    // no attempt number
		{in: "attempt_1700000000000_0200_1_0_000005_0", ok: false}, // Tez vertex of 1 digit
		{in: "task_1700000000000_0042_m_000003", ok: false},
	}
	for _, tc := range tests {
		got, ok := FindAttempt(tc.in)
		if ok != tc.ok || got != tc.want {
			t.Errorf("FindAttempt(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		if j := got.JobID(); j != tc.job {
			t.Errorf("FindAttempt(%q).JobID() = %q, want %q", tc.in, j, tc.job)
		}
		if task := got.TaskID(); task != tc.task {
			t.Errorf("FindAttempt(%q).TaskID() = %q, want %q", tc.in, task, tc.task)
		}
	}
}

func TestParseAttempt(t *testing.T) {
	tests := []struct {
		in string
		ok bool
	}{
		{"attempt_1700000000000_0042_m_000003_0", true},
		{"attempt_1700000000000_0200_1_00_000005_0", true},
		{" attempt_1700000000000_0042_m_000003_0", false},
		{"attempt_1700000000000_0042_m_000003_0.cleanup", false},
		{"attempt_1700000000000_0042_m_000003_0x", false},
		{"xattempt_1700000000000_0042_m_000003_0", false},
		{"attempt_1700000000000_0042_m_000003", false},
		{"", false},
	}
	for _, tc := range tests {
		a, ok := ParseAttempt(tc.in)
		if ok != tc.ok {
			t.Errorf("ParseAttempt(%q) ok = %v, want %v", tc.in, ok, tc.ok)
		}
		if ok && a.Raw != tc.in {
			t.Errorf("ParseAttempt(%q).Raw = %q", tc.in, a.Raw)
		}
		if !ok && a != (AttemptID{}) {
			t.Errorf("ParseAttempt(%q) = %+v on failure, want the zero value", tc.in, a)
		}
	}
	if got := (AttemptID{Raw: "attempt"}).TaskID(); got != "attempt" {
		t.Errorf("TaskID of an id without '_' = %q", got)
	}
}

func TestFindContainer(t *testing.T) {
	tests := []struct {
		in    string
		ok    bool
		want  ContainerID
		app   string
		job   string
		first bool
	}{
		{in: "container_1700000000000_0042_01_000005", ok: true,
			want: ContainerID{Raw: "container_1700000000000_0042_01_000005", ClusterTS: "1700000000000", AppSeq: "0042", AppAttempt: "01", Seq: "000005"},
			app:  "application_1700000000000_0042", job: "job_1700000000000_0042"},
		{in: "container_e07_1700000000000_0042_01_000001", ok: true,
			want: ContainerID{Raw: "container_e07_1700000000000_0042_01_000001", Epoch: 7, ClusterTS: "1700000000000", AppSeq: "0042", AppAttempt: "01", Seq: "000001"},
			app:  "application_1700000000000_0042", job: "job_1700000000000_0042", first: true},
		{in: "container_e1234_1700000000000_10042_02_1000001", ok: true, // big epoch, app, seq
			want: ContainerID{Raw: "container_e1234_1700000000000_10042_02_1000001", Epoch: 1234, ClusterTS: "1700000000000", AppSeq: "10042", AppAttempt: "02", Seq: "1000001"},
			app:  "application_1700000000000_10042", job: "job_1700000000000_10042"},
		{in: "/sys/fs/cgroup/cpu/hadoop-yarn/container_e07_1700000000000_0042_02_000001/tasks", ok: true,
			want: ContainerID{Raw: "container_e07_1700000000000_0042_02_000001", Epoch: 7, ClusterTS: "1700000000000", AppSeq: "0042", AppAttempt: "02", Seq: "000001"},
			app:  "application_1700000000000_0042", job: "job_1700000000000_0042", first: true},
		{in: "container_1700000000000_0042_01_00005", ok: false},
		{in: "container_1700000000000_0042_1_000005", ok: false},
		{in: "container_e_1700000000000_0042_01_000005", ok: false},
		{in: "application_1700000000000_0042", ok: false},
		{in: "", ok: false},
	}
	for _, tc := range tests {
		got, ok := FindContainer(tc.in)
		if ok != tc.ok || got != tc.want {
			t.Errorf("FindContainer(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		if got.AppID() != tc.app || got.JobID() != tc.job || got.IsFirst() != tc.first {
			t.Errorf("FindContainer(%q): AppID %q JobID %q IsFirst %v; want %q %q %v", tc.in, got.AppID(), got.JobID(), got.IsFirst(), tc.app, tc.job, tc.first)
		}
	}
}

func TestFindAppAndJob(t *testing.T) {
	apps := []struct{ in, want string }{
		{"application_1700000000000_0042", "application_1700000000000_0042"},
		{"/data/yarn/logs/application_1700000000000_0042/container_1700000000000_0042_01_000005", "application_1700000000000_0042"},
		{"application_1700000000000_42", ""},
		{"app_1700000000000_0042", ""},
		{"", ""},
	}
	for _, tc := range apps {
		got, ok := FindApp(tc.in)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("FindApp(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
		}
	}
	jobs := []struct{ in, want string }{
		{"job_1700000000000_0042", "job_1700000000000_0042"},
		{"/userlogs/job_201401011200_0007/attempt_201401011200_0007_m_000012_0", "job_201401011200_0007"},
		{"job_local1234567_0001", "job_local1234567_0001"}, // the local job runner's ids
		{"job_201401011200_7", ""},
		{"", ""},
	}
	for _, tc := range jobs {
		got, ok := FindJob(tc.in)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("FindJob(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
		}
	}
}

func TestJobAppMapping(t *testing.T) {
	tests := []struct{ app, job string }{
		{"application_1700000000000_0042", "job_1700000000000_0042"},
		{"application_1700000000000_123456", "job_1700000000000_123456"},
	}
	for _, tc := range tests {
		if got := JobForApp(tc.app); got != tc.job {
			t.Errorf("JobForApp(%q) = %q, want %q", tc.app, got, tc.job)
		}
		if got := AppForJob(tc.job); got != tc.app {
			t.Errorf("AppForJob(%q) = %q, want %q", tc.job, got, tc.app)
		}
	}
	// Anything else is passed through.
	for _, s := range []string{"", "container_1_0001_01_000001", "attempt_1_0001_m_000000_0"} {
		if JobForApp(s) != s || AppForJob(s) != s {
			t.Errorf("mapping of %q changed it", s)
		}
	}
	// A MapReduce attempt, its container and its application name one job.
	a, _ := ParseAttempt("attempt_1700000000000_0042_m_000003_0")
	c, _ := FindContainer("container_e07_1700000000000_0042_01_000005")
	if a.JobID() != c.JobID() || AppForJob(a.JobID()) != c.AppID() {
		t.Errorf("attempt job %q, container job %q app %q", a.JobID(), c.JobID(), c.AppID())
	}
}
