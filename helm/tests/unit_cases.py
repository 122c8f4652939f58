"""Chart unit tests: render, then assert on the objects; and the values that
must refuse to render. Run through `charttest.py unit`."""

import yaml

V = None  # the charttest module, set by run()


def values(chart, case):
    return V.TESTS / "values" / chart / f"{case}.yaml"


def objs(chart, case):
    return V.render(chart, values(chart, case))


def cfg(o, chart_objs, name):
    """The parsed yarilo.yaml of ConfigMap `name`."""
    return yaml.safe_load(V.named(chart_objs, "ConfigMap", name)["data"]["yarilo.yaml"])


def container(workload, name):
    for c in workload["spec"]["template"]["spec"]["containers"]:
        if c["name"] == name:
            return c
    V.fail(f"{workload['metadata']['name']} has no container {name}")


def eq(what, got, want):
    if got != want:
        V.fail(f"{what}: got {got!r}, want {want!r}")


def has(what, items, item):
    if item not in items:
        V.fail(f"{what}: {item!r} not in {items!r}")


def names(o):
    return {(x["kind"], x["metadata"]["name"]) for x in o}


# ------------------------------------------------------------ yarilo-shared


def shared_defaults():
    o = objs("yarilo-shared", "defaults")
    auth = V.named(o, "Deployment", "yarilo-auth")
    warden = V.named(o, "Deployment", "yarilo-warden")
    eq("auth replicas", auth["spec"]["replicas"], 2)
    eq("warden replicas", warden["spec"]["replicas"], 2)
    eq("warden strategy with redis state", warden["spec"]["strategy"]["type"], "RollingUpdate")
    w = cfg(None, o, "yarilo-warden-config")["warden_service"]
    eq("warden state", (w["state_backend"], w["replicas"], w["redis"]), ("redis", 2, "env:YARILO_REDIS_URL"))
    a = cfg(None, o, "yarilo-auth-config")
    eq("auth token store with two replicas", a["auth"]["token_store"], "redis")
    eq("auth passdb default", a["passdb"], [{"driver": "passwd-file", "args": "/etc/yarilo/passwd/users"}])
    for svc, port in (("yarilo-auth", 9106), ("yarilo-warden", 9105), ("yarilo-redis", 6379)):
        eq(f"Service {svc}", V.named(o, "Service", svc)["spec"]["ports"][0]["port"], port)
    env = {e["name"]: e for e in container(auth, "auth")["env"]}
    eq("auth gets the Redis URL with the password from the Secret", env["YARILO_REDIS_URL"]["value"], "redis://:$(REDIS_PASSWORD)@yarilo-redis:6379/0")
    eq("generated Redis secret survives uninstall/upgrade", V.named(o, "Secret", "yarilo-redis-auth")["metadata"]["annotations"]["helm.sh/resource-policy"], "keep")
    for d in (auth, warden):
        eq(f"{d['metadata']['name']}: no liveness probe without the watchdog", "livenessProbe" in d["spec"]["template"]["spec"]["containers"][0], False)
    V.named(o, "PodDisruptionBudget", "yarilo-auth")


def shared_minimal():
    o = objs("yarilo-shared", "minimal")
    warden = V.named(o, "Deployment", "yarilo-warden")
    eq("warden strategy with memory state (never two pods)", warden["spec"]["strategy"]["type"], "Recreate")
    eq("no Redis without a user", [n for k, n in names(o) if "redis" in n], [])
    eq("auth tokens in memory with one replica", cfg(None, o, "yarilo-auth-config")["auth"]["token_store"], "memory")
    eq("no PDB for one replica", V.by_kind(o, "PodDisruptionBudget"), [])


def shared_ha():
    o = objs("yarilo-shared", "ha")
    auth = V.named(o, "Deployment", "yarilo-auth")
    c = container(auth, "auth")
    eq("liveness on /healthz with the watchdog", c["livenessProbe"]["httpGet"]["path"], "/healthz")
    has("SQL URL from the Secret", [e["name"] for e in c["env"]], "YARILO_SQL_URL")
    a = cfg(None, o, "yarilo-auth-config")
    eq("raw config merged", a["auth"]["auth_cache_size"], 10000)
    eq("passdb given", a["passdb"][0]["driver"], "sql")
    eq("external Redis URL", {e["name"]: e.get("value") for e in c["env"]}["YARILO_REDIS_URL"], "redis://redis-ha.example.svc:6379/0")
    kinds = {k for k, _ in names(o)}
    has("NetworkPolicies", kinds, "NetworkPolicy")
    has("ServiceMonitor", kinds, "ServiceMonitor")
    V.named(o, "NetworkPolicy", "yarilo-shared-default-deny")
    V.named(o, "Service", "yarilo-auth-metrics")


def shared_tls():
    o = objs("yarilo-shared", "internal-tls")
    a = cfg(None, o, "yarilo-auth-config")["internal_tls"]
    eq("pinned server name", a["server_name"], "yarilo-internal")
    cert = V.named(o, "Certificate", "yarilo-auth-internal-tls")["spec"]
    has("server name SAN", cert["dnsNames"], "yarilo-internal")
    has("seed role SAN", cert["dnsNames"], "auth.role.yarilo.internal")
    has("yarilo role SAN", cert["uris"], "yarilo-role:auth")
    vols = {v["name"]: v for v in V.named(o, "Deployment", "yarilo-auth")["spec"]["template"]["spec"]["volumes"]}
    eq("auth mounts its certificate", vols["internal-tls"]["secret"]["secretName"], "yarilo-auth-internal-tls")


def shared_existing():
    o = objs("yarilo-shared", "existing-secrets")
    eq("no generated Secrets", V.by_kind(o, "Secret"), [])
    spec = V.named(o, "Deployment", "yarilo-auth")["spec"]["template"]["spec"]
    vols = {v["name"]: v for v in spec["volumes"]}
    eq("own users file", vols["users"]["secret"]["secretName"], "my-users")
    eq("own internal TLS", vols["internal-tls"]["secret"]["secretName"], "my-internal-tls")
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    eq("own Redis password", env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"], {"name": "my-redis", "key": "password"})


# ---------------------------------------------------------- yarilo-director


def director_defaults():
    o = objs("yarilo-director", "defaults")
    d = V.named(o, "Deployment", "yarilo-director")
    eq("directors", d["spec"]["replicas"], 3)
    c = container(d, "director")
    has("POD_IP for the ring address", [e["name"] for e in c["env"]], "POD_IP")
    svc = cfg(None, o, "yarilo-director-config")["director_service"]
    eq("ring seeded from the headless Service", svc["peers"], ["yarilo-director-ring:9102"])
    eq("listen", (svc["listen"], svc["api"]["listen"]), (":9102", ":9103"))
    eq("secrets from the environment", (svc["ring_secret"], svc["api"]["token"]), ("env:YARILO_DIRECTOR_RING_SECRET", "env:YARILO_DIRECTOR_API_TOKEN"))
    eq("grace: session_grace_period + kill_timeout", d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 35)
    eq("session_grace_period", svc["session_grace_period"], 30)
    ring = V.named(o, "Service", "yarilo-director-ring")["spec"]
    eq("ring seed is headless", ring["clusterIP"], "None")
    eq("LOOKUP Service is a ClusterIP", "clusterIP" in V.named(o, "Service", "yarilo-director")["spec"], False)
    for s in ("yarilo-director-ring-secret", "yarilo-director-api-token"):
        eq(f"{s} kept across upgrades", V.named(o, "Secret", s)["metadata"]["annotations"]["helm.sh/resource-policy"], "keep")
    for login, proto, port in (("imap-login", "imap", 10143), ("pop3-login", "pop3", 10110), ("submission-login", "submission", 10587), ("lmtp-login", "lmtp", 10024)):
        lc = cfg(None, o, f"yarilo-{login}-config")
        eq(f"{login} route", (lc["login"][proto]["director_addr"], lc["login"][proto]["backend_port"]), ("yarilo-director:9102", port))
        eq(f"{login} auth", lc["auth_client"]["address"], "yarilo-auth:9106")
        eq(f"{login} warden", lc.get("warden_client", {}).get("enabled", False), proto != "lmtp")
    imap = V.named(o, "Service", "yarilo-imap-login")["spec"]
    eq("public IMAP ports", [(p["port"], p["targetPort"]) for p in imap["ports"]], [(143, "imap"), (993, "imaps")])
    eq("client address kept", (imap["type"], imap["externalTrafficPolicy"]), ("LoadBalancer", "Local"))
    eq("LMTP is for the MTA inside the cluster", V.named(o, "Service", "yarilo-lmtp-login")["spec"]["type"], "ClusterIP")


def director_minimal():
    o = objs("yarilo-director", "minimal")
    svc = cfg(None, o, "yarilo-director-config")["director_service"]
    eq("a lone director seeds nothing", svc["peers"], [])
    eq("only IMAPS listens", cfg(None, o, "yarilo-imap-login-config")["services"]["imap"]["enabled"], False)
    eq("fail closed on warden", cfg(None, o, "yarilo-imap-login-config")["warden_client"]["fail_open"], False)
    eq("logins rendered", sorted(n for k, n in names(o) if k == "Deployment"), ["yarilo-director", "yarilo-imap-login"])


def director_ha():
    o = objs("yarilo-director", "ha")
    for wl, pod in V.pods(o):
        for c in pod["containers"]:
            eq(f"{c['name']} liveness with the watchdog", c["livenessProbe"]["httpGet"]["path"], "/healthz")
    lc = cfg(None, o, "yarilo-imap-login-config")
    eq("PROXY protocol on every listener", {n: s["haproxy_protocol"] for n, s in lc["services"].items()}, {"imap": True, "imaps": True})
    eq("PROXY from the balancer only", lc["general"]["haproxy"], {"enabled": True, "trusted_nets": ["10.0.0.0/8"], "timeout": 3})
    eq("policy", cfg(None, o, "yarilo-director-config")["director_service"]["assignment_policy"], "least_sessions")
    eq("trafficPolicy", V.named(o, "Service", "yarilo-imap-login")["spec"]["externalTrafficPolicy"], "Cluster")
    eq("NodePort", V.named(o, "Service", "yarilo-submission-login")["spec"]["type"], "NodePort")
    cert = V.named(o, "Certificate", "yarilo-client-tls")["spec"]
    eq("client certificate names", cert["dnsNames"], ["imap.example.org", "smtp.example.org"])
    eq("login mounts it", lc["tls"]["cert"], "/etc/yarilo/tls/tls.crt")
    V.named(o, "NetworkPolicy", "yarilo-director-default-deny")
    np = V.named(o, "NetworkPolicy", "yarilo-imap-login")["spec"]["ingress"]
    eq("clients reach the login ports", sorted(p["port"] for p in np[0]["ports"]), [10143, 10993])
    eq("PDB", V.named(o, "PodDisruptionBudget", "yarilo-director")["spec"]["maxUnavailable"], 1)
    V.named(o, "ServiceMonitor", "yarilo-director")


def director_tls():
    o = objs("yarilo-director", "internal-tls")
    dc = cfg(None, o, "yarilo-director-config")
    eq("ring name rendered", dc["director_service"]["ring_tls_server_name"], "yarilo-director-ring")
    eq("pinned name", dc["internal_tls"]["server_name"], "yarilo-internal")
    cert = V.named(o, "Certificate", "yarilo-director-internal-tls")["spec"]
    for n in ("yarilo-internal", "yarilo-director", "yarilo-director-ring", "director.role.yarilo.internal"):
        has("director SANs", cert["dnsNames"], n)
    eq("director role URI", cert["uris"], ["yarilo-role:director"])
    login = V.named(o, "Certificate", "yarilo-login-internal-tls")["spec"]
    has("login role", login["uris"], "yarilo-role:login")
    has("login role (seed form)", login["dnsNames"], "login.role.yarilo.internal")
    vols = {v["name"]: v for v in V.named(o, "Deployment", "yarilo-imap-login")["spec"]["template"]["spec"]["volumes"]}
    eq("logins mount the login certificate", vols["internal-tls"]["secret"]["secretName"], "yarilo-login-internal-tls")


def director_tags():
    o = objs("yarilo-director", "two-tags")
    eq("static tag pool", cfg(None, o, "yarilo-imap-login-config")["login"]["imap"]["director_tag"], "b")
    eq("other logins untagged", cfg(None, o, "yarilo-pop3-login-config")["login"]["pop3"]["director_tag"], "")
    eq("static backend", cfg(None, o, "yarilo-director-config")["director_service"]["mail_servers"], [{"host": "yarilo-backend-a", "port": 10143, "tag": "a", "vhosts": 100}])


def director_existing():
    o = objs("yarilo-director", "existing-secrets")
    eq("no generated Secrets", V.by_kind(o, "Secret"), [])
    env = {e["name"]: e for e in container(V.named(o, "Deployment", "yarilo-director"), "director")["env"]}
    eq("ring secret", env["YARILO_DIRECTOR_RING_SECRET"]["valueFrom"]["secretKeyRef"], {"name": "my-ring", "key": "ring-secret"})
    eq("api token", env["YARILO_DIRECTOR_API_TOKEN"]["valueFrom"]["secretKeyRef"], {"name": "my-api-token", "key": "token"})
    vols = {v["name"]: v for v in V.named(o, "Deployment", "yarilo-director")["spec"]["template"]["spec"]["volumes"]}
    eq("director's own TLS Secret", vols["internal-tls"]["secret"]["secretName"], "my-director-tls")
    vols = {v["name"]: v for v in V.named(o, "Deployment", "yarilo-imap-login")["spec"]["template"]["spec"]["volumes"]}
    eq("client certificate Secret", vols["client-tls"]["secret"]["secretName"], "mail-example-org-tls")
    eq("no cert-manager objects", V.by_kind(o, "Certificate"), [])


# ----------------------------------------------------------- yarilo-backend


def backend_defaults():
    o = objs("yarilo-backend", "defaults")
    sts = V.named(o, "StatefulSet", "yarilo-backend-a")
    pod = sts["spec"]["template"]["spec"]
    eq("co-located containers", [c["name"] for c in pod["containers"]], ["imap", "pop3", "submission", "lmtp", "backend-reg"])
    eq("replicas", sts["spec"]["replicas"], 3)
    eq("headless Service", V.named(o, "Service", "yarilo-backend-a")["spec"]["clusterIP"], "None")
    eq("StatefulSet serviceName", sts["spec"]["serviceName"], "yarilo-backend-a")
    vols = {v["name"]: v for v in pod["volumes"]}
    eq("the tag volume", vols["data"]["persistentVolumeClaim"]["claimName"], "yarilo-mail-a")
    pvc = V.named(o, "PersistentVolumeClaim", "yarilo-mail-a")
    eq("RWX", pvc["spec"]["accessModes"], ["ReadWriteMany"])
    eq("volume kept on uninstall", pvc["metadata"]["annotations"]["helm.sh/resource-policy"], "keep")
    c = cfg(None, o, "yarilo-backend-a-config")
    br = c["backend_register"]
    eq("registration", (br["tag"], br["director_addr"], br["vhosts"]), ("a", "yarilo-director:9102", 100))
    tel = [container(sts, p)["env"][0]["value"] for p in ("imap", "pop3", "submission", "lmtp")]
    eq("heartbeat gated on every protocol container's /readyz", br["readyz_urls"], [f"http://127.0.0.1{t}/readyz" for t in tel])
    eq("one telemetry port per container", len(set(tel)), 4)
    eq("locks of the tag", c["locks_client"], {"mode": "remote", "endpoints": ["yarilo-locks-a:9104"]})
    eq("ports", {p: c["services"][p]["port"] for p in c["services"]}, {"imap": 10143, "pop3": 10110, "submission": 10587, "lmtp": 10024})
    has("POD_IP for backend-reg", [e["name"] for e in container(sts, "backend-reg")["env"]], "POD_IP")
    eq("locks replicas", V.named(o, "Deployment", "yarilo-locks-a")["spec"]["replicas"], 2)
    eq("locks state in the tag's Redis", cfg(None, o, "yarilo-locks-a-config")["locks_service"], {"mode": "remote", "listen": ":9104", "redis": "env:YARILO_REDIS_URL"})
    V.named(o, "Deployment", "yarilo-redis-a")
    eq("relay", c["submission"]["relay_host"], "mta.example.org")
    # quota-status: its own Deployment on the tag's volume, a stable ClusterIP for the MTA.
    qd = V.named(o, "Deployment", "yarilo-quota-status-a")
    eq("quota-status replicas", qd["spec"]["replicas"], 2)
    eq("quota-status command", container(qd, "quota-status")["command"][:2], ["yarilo", "quota-status"])
    qvols = {v["name"]: v for v in qd["spec"]["template"]["spec"]["volumes"]}
    eq("quota-status reads the tag volume", qvols["data"]["persistentVolumeClaim"]["claimName"], "yarilo-mail-a")
    qsvc = V.named(o, "Service", "yarilo-quota-status-a")["spec"]
    eq("quota-status ClusterIP Service", (qsvc.get("clusterIP"), [p["port"] for p in qsvc["ports"]]), (None, [12340]))
    qc = cfg(None, o, "yarilo-quota-status-a-config")
    eq("quota-status listens", qc["quota_status"]["listen"], ":12340")
    eq("quota-status locks of the tag", qc["locks_client"], c["locks_client"])
    eq("quota-status auth", qc["auth_client"], c["auth_client"])


def backend_two_tags():
    a = objs("yarilo-backend", "defaults")
    b = objs("yarilo-backend", "tag-b")
    clash = names(a) & names(b)
    eq("two tags in one namespace share no object", clash, set())
    sel = lambda objs_: {tuple(sorted(w["spec"]["selector"]["matchLabels"].items())) for w, _ in V.pods(objs_)}
    eq("and no selector", sel(a) & sel(b), set())
    eq("tag b registers as b", cfg(None, b, "yarilo-backend-b-config")["backend_register"]["tag"], "b")


def backend_minimal():
    o = objs("yarilo-backend", "minimal")
    sts = V.named(o, "StatefulSet", "yarilo-backend-a")
    eq("containers", [c["name"] for c in sts["spec"]["template"]["spec"]["containers"]], ["imap", "lmtp", "backend-reg"])
    eq("gate on the protocols present", len(cfg(None, o, "yarilo-backend-a-config")["backend_register"]["readyz_urls"]), 2)
    eq("existing claim, none made", V.by_kind(o, "PersistentVolumeClaim"), [])
    eq("no PDB with one pod", V.by_kind(o, "PodDisruptionBudget"), [])


def backend_ha():
    o = objs("yarilo-backend", "ha")
    c = cfg(None, o, "yarilo-backend-main-config")
    eq("mail location", c["store"]["mail_location"], "maildir:/var/lib/yarilo/mail/%Ld/%Ln:INDEX=/var/lib/yarilo/index/%Ld/%Ln")
    eq("relay credentials", c["submission"]["relay_password"], "env:YARILO_RELAY_PASSWORD")
    eq("vhosts", c["backend_register"]["vhosts"], 50)
    env = {e["name"]: e for e in container(V.named(o, "Deployment", "yarilo-locks-main"), "locks")["env"]}
    eq("Redis URL from a Secret", env["YARILO_REDIS_URL"]["valueFrom"]["secretKeyRef"], {"name": "redis-ha", "key": "redis-url"})
    sm = V.named(o, "ServiceMonitor", "yarilo-backend-main")["spec"]
    has("every container scraped", [e["port"] for e in sm["endpoints"]], "tel-backend-reg")
    V.named(o, "Service", "yarilo-backend-main-metrics")


def backend_tls():
    o = objs("yarilo-backend", "internal-tls")
    cert = V.named(o, "Certificate", "yarilo-backend-a-internal-tls")["spec"]
    eq("pod roles", cert["uris"], ["yarilo-role:backend", "yarilo-role:backend-reg"])
    eq("issuer", cert["issuerRef"], {"name": "yarilo-internal-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"})
    V.named(o, "Certificate", "yarilo-locks-a-internal-tls")
    qcert = V.named(o, "Certificate", "yarilo-quota-status-a-internal-tls")["spec"]
    eq("quota-status role", qcert["uris"], ["yarilo-role:backend"])


# -------------------------------------------------------- yarilo-standalone


def standalone_defaults():
    o = objs("yarilo-standalone", "defaults")
    deps = sorted(n for k, n in names(o) if k == "Deployment")
    eq("components", deps, sorted(["yarilo-imap-login", "yarilo-pop3-login", "yarilo-submission-login", "yarilo-imap", "yarilo-pop3", "yarilo-submission", "yarilo-lmtp", "yarilo-auth", "yarilo-warden", "yarilo-locks", "yarilo-redis"]))
    eq("lmtp-login off by default", ("Deployment", "yarilo-lmtp-login") in names(o), False)
    eq("imap-login pipes to the imap Service", cfg(None, o, "yarilo-imap-login-config")["login"]["imap"]["backend_addr"], "yarilo-imap:10143")
    lm = V.named(o, "Service", "yarilo-lmtp")["spec"]["ports"][0]
    eq("MTA delivers on 24", (lm["port"], lm["targetPort"]), (24, "lmtp"))
    eq("locks always remote", cfg(None, o, "yarilo-imap-config")["locks_client"]["mode"], "remote")
    eq("locks replicas", V.named(o, "Deployment", "yarilo-locks")["spec"]["replicas"], 2)
    for p in ("imap", "pop3", "submission", "lmtp"):
        vols = {v["name"]: v for v in V.named(o, "Deployment", f"yarilo-{p}")["spec"]["template"]["spec"]["volumes"]}
        eq(f"{p} on the one volume", vols["data"]["persistentVolumeClaim"]["claimName"], "yarilo-mail")
    eq("one replica each", {V.named(o, "Deployment", f"yarilo-{p}")["spec"]["replicas"] for p in ("imap", "imap-login", "auth", "warden")}, {1})


def standalone_ha():
    o = objs("yarilo-standalone", "ha")
    eq("lmtp-login enabled", V.named(o, "Deployment", "yarilo-lmtp-login")["spec"]["replicas"], 2)
    eq("lmtp-login routes to the lmtp Service", cfg(None, o, "yarilo-lmtp-login-config")["login"]["lmtp"]["backend_addr"], "yarilo-lmtp:10024")
    eq("imap replicas", V.named(o, "Deployment", "yarilo-imap")["spec"]["replicas"], 3)
    eq("two auth replicas share tokens in Redis", cfg(None, o, "yarilo-auth-config")["auth"]["token_store"], "redis")


def rendering_is_deterministic():
    """With the generated credentials given as values (what the lab does), two renderings are byte-identical."""
    for chart in V.CHARTS:
        f = values(chart, "defaults")
        args = ["template", "test", str(V.HELM_DIR / chart), "--namespace", "mail", "-f", str(f)]
        first, second = V.helm(*args)[1], V.helm(*args)[1]
        if first != second:
            V.fail(f"{chart}: two renderings of defaults.yaml differ")


# --------------------------------------------------------- refused values


REFUSED = [
    ("yarilo-shared", {"components": {"warden": {"replicas": 2, "service": {"state_backend": "memory"}}}}, "state_backend is memory"),
    ("yarilo-standalone", {"components": {"warden": {"replicas": 2, "service": {"state_backend": "memory"}}, "submission": {"relay_host": "m"}}}, "state_backend is memory"),
    ("yarilo-shared", {"components": {"auth": {"replicas": 2, "token_store": "memory"}}}, "token_store is memory"),
    ("yarilo-director", {"internalTLS": {"enabled": True, "secretName": "shared-internal"}}, "ringTlsServerName is empty"),
    ("yarilo-backend", {"components": {"submission": {"relay_host": "m"}}}, "tag is required"),
    ("yarilo-backend", {"tag": "Bad_Tag", "components": {"submission": {"relay_host": "m"}}}, "/tag"),
    ("yarilo-backend", {"tag": "a"}, "relay_host"),
    ("yarilo-shared", {"internalTLS": {"enabled": True}}, "internalTLS.secretName"),
    ("yarilo-shared", {"internalTLS": {"enabled": True, "certificate": {"enabled": True}}}, "issuerRef.name"),
    ("yarilo-director", {"components": {"director": {"ping_intervall": 5}}}, "ping_intervall"),
    ("yarilo-director", {"components": {"manageSieveLogin": {"enabled": True}}}, "manageSieveLogin"),
    ("yarilo-backend", {"tag": "a", "components": {"fts": {"enabled": True}, "submission": {"relay_host": "m"}}}, "/components/fts/enabled"),
    ("yarilo-director", {"components": {"imapLogin": {"listeners": {"imap": {"enabled": False}, "imaps": {"enabled": False}}}}}, "every listener is disabled"),
    ("yarilo-director", {"components": {"director": {"assignment_policy": "random"}}}, "assignment_policy"),
    ("yarilo-shared", {"components": {"auth": {"config": {"auth": {"auth_cache_sise": 1}}}}}, "auth_cache_sise"),
    ("yarilo-backend", {"tag": "a", "config": {"imap": {"max_line_lenght": 1}}, "components": {"submission": {"relay_host": "m"}}}, "max_line_lenght"),
    ("yarilo-director", {"components": {"lmtpLogin": {"config": {"services": {"lmtp": {"ssl_mode": False}}}}}}, "ssl_mode"),
    ("yarilo-standalone", {"components": {"submission": {"relay_host": "m"}}, "global": {"clusterName": "Bad"}}, "clusterName"),
]


TESTS = [
    shared_defaults, shared_minimal, shared_ha, shared_tls, shared_existing,
    director_defaults, director_minimal, director_ha, director_tls, director_tags, director_existing,
    backend_defaults, backend_two_tags, backend_minimal, backend_ha, backend_tls,
    standalone_defaults, standalone_ha,
    rendering_is_deterministic,
]


def run(module):
    global V
    V = module
    failures = []
    for t in TESTS:
        try:
            t()
        except V.Failure as e:
            failures.append(f"{t.__name__}: {e}")
    for chart, vals, expect in REFUSED:
        try:
            V.render_fails(chart, vals, expect)
        except V.Failure as e:
            failures.append(f"refused {chart} {vals}: {e}")
    if failures:
        V.fail("\n".join(failures))
    return f"{len(TESTS)} render tests and {len(REFUSED)} refused values sets"
