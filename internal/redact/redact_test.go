package redact

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/taskscope/taskscope/internal/wire"
)

func TestString(t *testing.T) {
	m := Default()
	for _, c := range []struct{ in, want string }{
		// The forms of the issue, and the name stays.
		{"java -Dfs.s3a.secret.key=AKIAXX/abc org.X", "java -Dfs.s3a.secret.key=***** org.X"},
		{"java -Djavax.net.ssl.trustStorePassword=changeit -Xmx1g", "java -Djavax.net.ssl.trustStorePassword=***** -Xmx1g"},
		{"sqoop import --password=hunter2 --table t", "sqoop import --password=***** --table t"},
		{"sqoop import --password hunter2 --table t", "sqoop import --password ***** --table t"},
		{"env AWS_SECRET_ACCESS_KEY=wJalr/K7MDENG python m.py", "env AWS_SECRET_ACCESS_KEY=***** python m.py"},
		{"hadoop jar x.jar -D fs.azure.account.key.acct.blob.core.windows.net=Zm9v in out", "hadoop jar x.jar -D fs.azure.account.key.acct.blob.core.windows.net=***** in out"},
		{"spark-submit --conf spark.hadoop.fs.s3a.access.key=AKIA1 --conf spark.authenticate.secret=s3", "spark-submit --conf spark.hadoop.fs.s3a.access.key=***** --conf spark.authenticate.secret=*****"},
		{"keytool -storepass abc -keypass def", "keytool -storepass ***** -keypass *****"},
		{"x -api-key=k1 --API_KEY k2 --oauth.token T", "x -api-key=***** --API_KEY ***** --oauth.token *****"},
		{"HADOOP_CREDSTORE_PASSWORD=pw java", "HADOOP_CREDSTORE_PASSWORD=***** java"},
		// Quoted values, in bash -c scripts: up to the closing quote.
		{`bash -c exec java -Dx.password="a b c" -cp x Y`, `bash -c exec java -Dx.password=***** -cp x Y`},
		{`bash -c "java '--password=a b' x"`, `bash -c "java '--password=***** x"`},
		{`run --secret 'p q' next`, `run --secret ***** next`},
		{`export DB_PASSWORD='s3 cr3t'; exec java`, `export DB_PASSWORD=***** exec java`},
		// URLs with a password.
		{"sqoop --connect jdbc:mysql://etl:pw0rd@db:3306/x", "sqoop --connect jdbc:mysql://etl:*****@db:3306/x"},
		{"distcp s3a://AKIA:SEKRIT@bucket/p hdfs://nn:8020/p", "distcp s3a://AKIA:*****@bucket/p hdfs://nn:8020/p"},
		// Parameters of URLs and connection strings, wherever they stand.
		{"mapper.py --jdbc 'jdbc:mysql://db:3306/x?user=etl&password=pw1'", "mapper.py --jdbc 'jdbc:mysql://db:3306/x?user=etl&password=*****'"},
		{"x jdbc:mysql://db/x?password=pw1&user=etl", "x jdbc:mysql://db/x?password=*****&user=etl"},
		{"jdbc:sqlserver://db:1433;databaseName=x;user=sa;password=pw2;encrypt=true", "jdbc:sqlserver://db:1433;databaseName=x;user=sa;password=*****;encrypt=true"},
		{"jdbc:sqlserver://db;Password={a;b}c;user=sa", "jdbc:sqlserver://db;Password=*****;user=sa"},
		{"--url=postgresql://db/x?sslmode=require&sslpassword=pw3", "--url=postgresql://db/x?sslmode=require&sslpassword=*****"},
		{"curl https://api.example.com/v1?apikey=K1&q=1 https://h/cb#access_token=T1&state=s", "curl https://api.example.com/v1?apikey=*****&q=1 https://h/cb#access_token=*****&state=s"},
		{"-Dx.url=jdbc:hive2://h:10000/db;ssl=true;sslTrustStore=/t;trustStorePassword=pw4", "-Dx.url=jdbc:hive2://h:10000/db;ssl=true;sslTrustStore=/t;trustStorePassword=*****"},
		{`"Server=db;Database=x;User Id=sa;Password=pw5;"`, `"Server=db;Database=x;User Id=sa;Password=*****;"`},
		{"sqoop --connect jdbc:oracle:thin:scott/tiger@db:1521/svc", "sqoop --connect jdbc:oracle:thin:scott/*****@db:1521/svc"},
		{"s3a://KEY:S@b/p?x-amz-signature=abc&token=t", "s3a://KEY:*****@b/p?x-amz-signature=*****&token=*****"},
		// Not secrets: untouched.
		{"jdbc:mysql://db/x?user=etl&useSSL=true;a=b#frag", "jdbc:mysql://db/x?user=etl&useSSL=true;a=b#frag"},
		{"https://h/x?password_policy&q=1", "https://h/x?password_policy&q=1"},
		// A value that sets another.
		{"--conf=spark.authenticate.secret=s3 x", "--conf=spark.authenticate.secret=***** x"},
		{"java -Xmx1638m -Dyarn.app.container.log.dir=/x org.apache.hadoop.mapred.YarnChild 10.0.0.1 4 attempt_1_0001_m_000001_0 2",
			"java -Xmx1638m -Dyarn.app.container.log.dir=/x org.apache.hadoop.mapred.YarnChild 10.0.0.1 4 attempt_1_0001_m_000001_0 2"},
		{"-Dpassword.policy -Dfoo=bar secretsauce.jar", "-Dpassword.policy -Dfoo=bar secretsauce.jar"},
		{"python mapper.py", "python mapper.py"},
		{"", ""},
		{"--password", "--password"},
		{"--password=", "--password="},
		{"héllo --token=é x", "héllo --token=***** x"},
		// Tabs and newlines separate words too.
		{"a\t--password\tx\nb", "a\t--password\t*****\nb"},
	} {
		got := m.String(c.in)
		if got != c.want {
			t.Errorf("String(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
		if again := m.String(got); again != got {
			t.Errorf("not idempotent on %q: %q", got, again)
		}
	}
}

func TestPattern(t *testing.T) {
	m, err := New(`(?i)^db\.pass$`)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.String("-Ddb.pass=x -Ddb.password=y"); got != "-Ddb.pass=***** -Ddb.password=y" {
		t.Errorf("custom pattern: %q", got)
	}
	if _, err := New("("); err == nil {
		t.Error("a broken pattern was accepted")
	}
	if _, err := New("x*"); err == nil || !strings.Contains(err.Error(), "every name") {
		t.Errorf("a pattern that matches every name: %v", err)
	}
	var none *Masker
	if none.String("--password x") != "--password x" {
		t.Error("a nil Masker masks")
	}
}

func TestBatch(t *testing.T) {
	b := &wire.Batch{
		Processes: []wire.Process{{Cmdline: "java -Dx.secret=S1 Y", Comm: "token=S2"}},
		Attempts: []wire.Attempt{{AttemptID: "attempt_1_0001_m_000001_0", JavaOpts: "-Xmx1g -Dssl.keystore.password=S3", JobName: "etl password=S4",
			ExitDiagnostics: "Dump of the process-tree: |- 4243 4242 java -Dfs.s3a.secret.key=S6 YarnChild"}},
		Events: []wire.Event{{Message: "killed --token S5"}},
	}
	Default().Batch(b)
	enc := string(wire.Marshal(nil, b))
	for _, s := range []string{"S1", "S2", "S3", "S4", "S5", "S6"} {
		if strings.Contains(enc, s) {
			t.Errorf("%s is still in the batch", s)
		}
	}
	if !strings.Contains(enc, "ssl.keystore.password=*****") || b.Attempts[0].AttemptID != "attempt_1_0001_m_000001_0" {
		t.Errorf("batch after masking: %+v", b)
	}
}

// The cache of verdicts is bounded: names beyond it are matched each time.
func TestCacheBounded(t *testing.T) {
	m := Default()
	for i := range maxCached + 100 {
		m.String("--n" + strings.Repeat("x", i%50) + string(rune('a'+i%26)) + itoa(i) + " v")
	}
	if n := m.cached.Load(); n > maxCached {
		t.Errorf("%d names cached, bound %d", n, maxCached)
	}
	if m.String("--password v") != "--password *****" {
		t.Error("a full cache stops masking")
	}
}

func itoa(i int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + i%10)}, b...)
		if i /= 10; i == 0 {
			return string(b)
		}
	}
}

// FuzzString: masking never panics, keeps valid UTF-8 valid, is
// idempotent, and a secret planted in any of the forms does not survive.
func FuzzString(f *testing.F) {
	for _, s := range []string{"java -Dx.password=1 Y", "--token a b", "a=b c=d", "s3a://k:s@b/p", `-Dx.secret="a b`, "--secret", "'--password' x", "-D"} {
		f.Add(s, "hunter2")
	}
	m := Default()
	forms := []string{" -Dfs.s3a.secret.key=%s ", " --password=%s ", " --password %s ", " DB_TOKEN=%s ", " jdbc:mysql://u:%s@db/x ",
		" jdbc:mysql://db/x?user=u&password=%s&x=1 ", " jdbc:sqlserver://db;user=sa;password=%s ", " https://h/p?apikey=%s ",
		" postgresql://db/x?sslpassword=%s ", " h/cb#access_token=%s ", " jdbc:oracle:thin:u/%s@db:1521/s "}
	f.Fuzz(func(t *testing.T, s, secret string) {
		out := m.String(s)
		if utf8.ValidString(s) && !utf8.ValidString(out) {
			t.Fatalf("String(%q) = %q: not UTF-8", s, out)
		}
		if again := m.String(out); again != out {
			t.Fatalf("not idempotent: %q -> %q -> %q", s, out, again)
		}
		if len(secret) < 4 || strings.ContainsAny(secret, " \t\n\r\v\f'\"@/?#:&;{}=") || strings.Contains(s, secret) || strings.Contains(Mask, secret) {
			return
		}
		for _, form := range forms {
			in := s + strings.Replace(form, "%s", secret, 1) + s
			if out := m.String(in); strings.Contains(out, secret) {
				t.Fatalf("String(%q) = %q keeps the secret", in, out)
			}
		}
	})
}

// FuzzURL: a secret in a URL or a connection string that the fuzzer
// builds (a parameter of its query, fragment or key=value list whose name
// names a secret, the password of its user:password@ or of an Oracle
// user/password@) never survives masking; the parameter's name does, and
// masking is idempotent.
func FuzzURL(f *testing.F) {
	f.Add("jdbc:mysql", "db:3306", "x", "", "password", "", "hunter22", uint8(0))
	f.Add("jdbc:sqlserver", "db:1433", "databaseName=x", "ssl", "password", "", "pw;x", uint8(2))
	f.Add("https", "api.example.com", "v1/q", "", "api", "key", "K123", uint8(1))
	f.Add("postgresql", "db", "x", "", "access", "_token", "T-1.2", uint8(4))
	f.Add("s3a", "bucket", "p", "", "secret", "", "ab+/cd", uint8(5))
	f.Add("jdbc:oracle:thin", "db:1521", "svc", "", "token", "", "tiger", uint8(6))
	m := Default()
	words := []string{"password", "secret", "token", "passwd", "apikey", "api_key", "access_token", "sslpassword", "PWD_password"}
	f.Fuzz(func(t *testing.T, scheme, host, path, pre, word, suf, secret string, form uint8) {
		keep := func(s, drop string) string {
			return strings.Map(func(r rune) rune {
				if r <= ' ' || r == 0x7f || strings.ContainsRune(drop, r) || !utf8.ValidRune(r) || r == utf8.RuneError {
					return -1
				}
				return r
			}, s)
		}
		scheme, host, path = keep(scheme, `'"/@?#&;={}:`), keep(host, `'"/@?#&;={}`), keep(path, `'"@?#&;{}`)
		name := keep(pre, "") + word + keep(suf, "")
		if !isName(name) || !m.secretName(name) {
			name = words[int(form)%len(words)]
		}
		secret = keep(secret, `'"@/?#&;={}:\`)
		if scheme == "" || len(secret) < 4 || strings.Contains(Mask, secret) {
			return
		}
		var u string
		switch form % 7 {
		case 0:
			u = scheme + "://" + host + "/" + path + "?a=1&" + name + "=" + secret + "&b=2"
		case 1:
			u = scheme + "://" + host + "/" + path + "?" + name + "=" + secret
		case 2:
			u = "jdbc:sqlserver://" + host + ";" + path + ";" + name + "={" + secret + "};x=y"
		case 3:
			u = `"Server=` + host + ";Database=" + path + ";User Id=u;" + name + "=" + secret + `;"`
		case 4:
			u = scheme + "://" + host + "/" + path + "#" + name + "=" + secret + "&state=1"
		case 5:
			u = scheme + "://user:" + secret + "@" + host + "/" + path + "?x=1"
		case 6:
			u = "jdbc:oracle:thin:user/" + secret + "@" + host + "/" + path
		}
		if strings.Contains(strings.ReplaceAll(u, secret, ""), secret) {
			return
		}
		for _, in := range []string{u, "java -cp x Y --url " + u + " -v", "--conf=spark.x.url=" + u, "'" + u + "'"} {
			if strings.Count(in, secret) != 1 {
				continue // the secret is also in another part
			}
			out := m.String(in)
			if strings.Contains(out, secret) {
				t.Fatalf("String(%q) = %q keeps the secret", in, out)
			}
			if form%7 < 5 && !strings.Contains(out, name+"=") {
				t.Fatalf("String(%q) = %q lost the name %q", in, out, name)
			}
			if again := m.String(out); again != out {
				t.Fatalf("not idempotent: %q -> %q -> %q", in, out, again)
			}
		}
	})
}

var yarnChild = "/usr/lib/jvm/java-8/bin/java -Djava.net.preferIPv4Stack=true -Dhadoop.metrics.log.level=WARN -Xmx820m " +
	"-Djava.io.tmpdir=/data/yarn/local/usercache/alice/appcache/application_1700000000000_0042/container_e01_1700000000000_0042_01_000005/tmp " +
	"-Dlog4j.configuration=container-log4j.properties -Dyarn.app.container.log.dir=/var/log/hadoop-yarn/containers/application_1700000000000_0042/container_e01_1700000000000_0042_01_000005 " +
	"-Dyarn.app.container.log.filesize=0 -Dhadoop.root.logger=INFO,CLA -Dhadoop.root.logfile=syslog " +
	"org.apache.hadoop.mapred.YarnChild 10.0.0.1 40111 attempt_1700000000000_0042_m_000003_0 5"

// BenchmarkString: the cost per command line (the agent masks each
// process's description, the server each batch's).
func BenchmarkString(b *testing.B) {
	m := Default()
	for _, c := range []struct{ name, s string }{
		{"yarnchild", yarnChild},
		{"yarnchild-secret", yarnChild + " -Dfs.s3a.secret.key=abc"},
		{"bash-c", "/bin/bash -c " + yarnChild + " 1>/var/log/stdout 2>/var/log/stderr"},
		{"sort", "sort -k1,1 -t \t"},
		{"plain", "python mapper.py"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				m.String(c.s)
			}
		})
	}
}
