"""Static checks of the deploy files, for machines without Docker or Kubernetes.

Parses every YAML file under deploy/, then checks what each file promises: the
Dockerfile is multi-stage, runs as a non-root user and health-checks /healthz; the
compose file runs Redis with an append-only file, the broker and Prometheus; the
quorum compose file runs an odd number of independent Redis nodes that never
come back with partial data, and brokers that list exactly those nodes; the
sentinel compose file runs one primary that every other Redis replicates, an
odd number of Sentinels that monitor it under one name with a majority quorum,
and brokers that list exactly those Sentinels and that name; the cluster
compose file runs cluster-enabled Redis servers that make whole shards of at
least three primaries, a create service that names every one of them, and
brokers that start once it has completed and seed from those servers; the
Kubernetes objects probe /readyz and /healthz, select each other's pods and
lock down their containers; the broker settings in the ConfigMap, and the LOCKBROKER_* variables
every broker is given, name only settings that config/lockbroker.toml documents.
Prints one line per check; exits 1 on any failure.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List

import yaml

DEPLOY = Path(__file__).resolve().parent
REPO = DEPLOY.parent

failures: List[str] = []
passes = 0


def check(label: str, condition: Any, detail: str = "") -> None:
    global passes
    if condition:
        passes += 1
        print(f"ok   {label}")
    else:
        failures.append(label)
        print(f"FAIL {label}{': ' + detail if detail else ''}")


def section(title: str, body: Callable[[], None]) -> None:
    print(f"--- {title}")
    try:
        body()
    except Exception as error:  # a malformed file fails its section, not the run
        check(f"{title} could be checked", False, f"{type(error).__name__}: {error}")


# -- YAML ------------------------------------------------------------------------------

def yaml_files() -> List[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yml", ".yaml"))


def load_all(path: Path) -> List[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def check_yaml_parses() -> None:
    for path in yaml_files():
        rel = path.relative_to(REPO)
        try:
            docs = load_all(path)
        except yaml.YAMLError as error:
            check(f"{rel} parses", False, str(error).replace("\n", " "))
            continue
        check(f"{rel} parses", docs, "no documents")


# -- broker environment ----------------------------------------------------------------

def environment(service: Dict[str, Any]) -> Dict[str, str]:
    """A compose service's environment as a mapping, from either of compose's
    spellings (a mapping, or a list of NAME=VALUE)."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(str(item).partition("=")[::2] for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def documented_variables() -> set:
    """The LOCKBROKER_* variables config/lockbroker.toml documents: one per key
    (LOCKBROKER_<TABLE>_<KEY>, LOCKBROKER_<KEY> for top-level keys) and every
    variable its comments name (LOCKBROKER_AUTH_KEYS_FILE, ...)."""
    import tomllib

    text = (REPO / "config" / "lockbroker.toml").read_text()
    names = set(re.findall(r"\bLOCKBROKER_[A-Z0-9_]*[A-Z0-9]\b", text))

    def walk(table: Dict[str, Any], prefix: str) -> None:
        for key, value in table.items():
            name = f"{prefix}_{key.upper()}"
            if isinstance(value, dict):
                walk(value, name)
            else:
                names.add(name)

    walk(tomllib.loads(text), "LOCKBROKER")
    return names


def check_broker_env(env: Dict[str, str], where: str) -> None:
    """The broker refuses to start on a LOCKBROKER_* variable that is no
    setting, so a typo here is a broker that never comes up."""
    try:
        known = documented_variables()
    except ModuleNotFoundError:  # Python < 3.11
        print(f"skipped: {where} variables (tomllib needs Python 3.11)")
        return
    unknown = [name for name in env if name.startswith("LOCKBROKER_")
               and name not in known and name.removesuffix("_FILE") not in known]
    check(f"{where}: LOCKBROKER_* variables name documented settings", not unknown,
          str(unknown))


# -- Dockerfile ------------------------------------------------------------------------

INSTRUCTIONS = {
    "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
    "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL",
}


def dockerfile_instructions(text: str) -> List[tuple]:
    """``(INSTRUCTION, arguments)`` pairs, with continuation lines joined and
    comments and parser directives dropped."""
    result, pending = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # comments may sit inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        keyword, _, rest = full.partition(" ")
        result.append((keyword.upper(), rest.strip()))
    if pending:
        result.append(("<unterminated>", pending))
    return result


def check_dockerfile() -> None:
    path = DEPLOY / "Dockerfile"
    steps = dockerfile_instructions(path.read_text())
    unknown = [k for k, _ in steps if k not in INSTRUCTIONS]
    check("Dockerfile: every instruction is known", not unknown, ", ".join(unknown))
    froms = [args for k, args in steps if k == "FROM"]
    check("Dockerfile: multi-stage (two FROM or more)", len(froms) >= 2, f"{len(froms)} FROM")
    stages = [re.split(r"\s+[Aa][Ss]\s+", a)[-1] for a in froms if re.search(r"\s[Aa][Ss]\s", a)]
    copies_from = [re.search(r"--from=(\S+)", a).group(1) for k, a in steps
                   if k == "COPY" and "--from=" in a]
    check("Dockerfile: the runtime copies from a named build stage",
          copies_from and all(c in stages for c in copies_from), f"stages {stages}")
    check("Dockerfile: the runtime image is Debian slim", "slim" in froms[-1], froms[-1])
    shipped = " ".join(a for k, a in steps if k == "COPY" and "--from=" in a)
    missing = [b for b in ("lockbroker", "lockctl") if f"/out/{b}" not in shipped]
    check("Dockerfile: the runtime ships lockbroker and lockctl", not missing, f"missing {missing}")
    last_stage = steps[max(i for i, (k, _) in enumerate(steps) if k == "FROM"):]
    users = [a for k, a in last_stage if k == "USER"]
    check("Dockerfile: the runtime runs as a non-root user",
          users and users[-1].split(":")[0] not in ("root", "0"), f"USER {users}")
    health = [a for k, a in last_stage if k == "HEALTHCHECK"]
    check("Dockerfile: HEALTHCHECK on /healthz", health and "/healthz" in health[-1])
    check("Dockerfile: has an ENTRYPOINT or CMD",
          any(k in ("ENTRYPOINT", "CMD") for k, _ in last_stage))
    for _, args in [(k, a) for k, a in steps if k == "COPY" and "--from=" not in a]:
        sources = [s for s in args.split()[:-1] if not s.startswith("--")]
        missing = [s for s in sources if not (REPO / s).exists()]
        check(f"Dockerfile: COPY {' '.join(sources)} exists in the build context",
              not missing, f"missing {missing}")


# -- docker compose and Prometheus -----------------------------------------------------

def check_compose() -> None:
    compose = load_all(DEPLOY / "docker-compose.yml")[0]
    services: Dict[str, Any] = compose.get("services", {})
    check("compose: services redis, lockbroker, prometheus",
          {"redis", "lockbroker", "prometheus"} <= set(services), str(sorted(services)))
    redis_cmd = " ".join(map(str, services["redis"].get("command", [])))
    check("compose: Redis runs with an append-only file", "--appendonly yes" in redis_cmd,
          redis_cmd)
    check("compose: Redis keeps its data in a volume",
          any(str(v).endswith(":/data") for v in services["redis"].get("volumes", [])))
    build = services["lockbroker"].get("build", {})
    dockerfile = (DEPLOY / build.get("context", ".") / build.get("dockerfile", "Dockerfile"))
    check("compose: the broker builds from deploy/Dockerfile", dockerfile.resolve().is_file(),
          str(dockerfile))
    env = environment(services["lockbroker"])
    check("compose: the broker reaches Redis by service name",
          str(env.get("LOCKBROKER_REDIS_URL", "")).startswith("redis://redis:"))
    check_broker_env(env, "compose: the broker")
    mounts = [str(v).split(":")[0] for v in services["prometheus"].get("volumes", [])]
    check("compose: Prometheus mounts deploy/prometheus",
          any((DEPLOY / m).resolve() == DEPLOY / "prometheus" for m in mounts if m.startswith(".")))

    prometheus = load_all(DEPLOY / "prometheus" / "prometheus.yml")[0]
    jobs = {job["job_name"]: job for job in prometheus.get("scrape_configs", [])}
    job = jobs.get("lockbroker", {})
    targets = [t for sc in job.get("static_configs", []) for t in sc.get("targets", [])]
    check("prometheus: scrapes lockbroker:7700/metrics",
          "lockbroker:7700" in targets and job.get("metrics_path", "/metrics") == "/metrics",
          str(targets))


# -- docker compose, quorum mode -------------------------------------------------------

def redis_persistence_is_all_or_nothing(command: str) -> bool:
    """A node restarted with its data must have all of it: an append-only file
    synced on every write (loaded in preference to any snapshot), or no
    persistence at all (it comes back empty, which the brokers detect). An RDB
    snapshot alone, Redis's default, brings back an older copy that looks current."""
    if "--appendonly yes" in command:
        return "--appendfsync always" in command
    return '--save ""' in command


def brokers_in_mode(mode: str, services: Dict[str, Any], brokers: List[str]):
    """Checks that a layout has two brokers or more, each running in `mode`,
    and yields each broker's name, service and environment."""
    check(f"{mode} compose: two brokers or more", len(brokers) >= 2, str(brokers))
    for name in brokers:
        broker = services[name]
        env = environment(broker)
        check(f"{mode} compose: {name} runs in {mode} mode",
              env.get("LOCKBROKER_REDIS_MODE") == mode, str(env.get("LOCKBROKER_REDIS_MODE")))
        yield name, broker, env


def check_replica_ack(where: str, env: Dict[str, str], replicas: int, who: str) -> None:
    """A broker's replica acknowledgement settings: a timeout below the command
    timeout, and no more replicas than `who` (a primary of the layout) has."""
    acked = env.get("LOCKBROKER_REDIS_MIN_REPLICAS_ACKED", "0")
    ack_ms = env.get("LOCKBROKER_REDIS_REPLICA_ACK_TIMEOUT_MS", "100")
    command_ms = env.get("LOCKBROKER_REDIS_COMMAND_TIMEOUT_MS", "1000")
    numbers = all(v.isdigit() for v in (acked, ack_ms, command_ms))
    check(f"{where} replica ack timeout is below the command timeout",
          numbers and 0 < int(ack_ms) < int(command_ms), f"{ack_ms} ms vs {command_ms} ms")
    check(f"{where} waits for no more replicas than {who}",
          numbers and int(acked) <= replicas, f"{acked} of {replicas}")


def check_broker_service(layout: str, name: str, broker: Dict[str, Any],
                         dependencies: List[str], which: str) -> None:
    """A broker of the compose file in deploy/<layout>/: built from
    deploy/Dockerfile, and started once every one of `dependencies` is healthy."""
    build = broker.get("build", {})
    dockerfile = (DEPLOY / layout / build.get("context", ".")
                  / build.get("dockerfile", "Dockerfile"))
    check(f"{layout} compose: {name} builds from deploy/Dockerfile",
          dockerfile.resolve() == DEPLOY / "Dockerfile", str(dockerfile))
    waits_for = broker.get("depends_on", {})
    check(f"{layout} compose: {name} starts once {which} is healthy",
          isinstance(waits_for, dict) and all(
              waits_for.get(n, {}).get("condition") == "service_healthy" for n in dependencies))


def check_published_ports(layout: str, services: Dict[str, Any], brokers: List[str]) -> None:
    """Only the brokers publish ports, one each, on loopback."""
    published = [str(p) for s in services.values() for p in s.get("ports", [])]
    check(f"{layout} compose: ports published on 127.0.0.1 only",
          published and all(p.startswith("127.0.0.1:") for p in published), str(published))
    host_ports = [p.split(":")[1] for p in published]
    check(f"{layout} compose: each broker on a port of its own, and nothing else published",
          len(host_ports) == len(set(host_ports)) == len(brokers)
          and all(services[b].get("ports") for b in brokers), str(published))


def check_quorum_compose() -> None:
    compose = load_all(DEPLOY / "quorum" / "docker-compose.yml")[0]
    services: Dict[str, Any] = compose.get("services", {})
    nodes = sorted(name for name, s in services.items()
                   if str(s.get("image", "")).startswith("redis:"))
    brokers = sorted(name for name, s in services.items()
                     if s.get("environment", {}).get("LOCKBROKER_REDIS_MODE") is not None)
    check("quorum compose: an odd number of Redis nodes, at least 3",
          len(nodes) >= 3 and len(nodes) % 2 == 1, str(nodes))
    check("quorum compose: two brokers or more", len(brokers) >= 2, str(brokers))

    data_volumes = []
    for name in nodes:
        node = services[name]
        command = " ".join(
            '""' if part == "" else str(part) for part in node.get("command", []))
        check(f"quorum compose: {name} replicates from no other node",
              "--replicaof" not in command and "--slaveof" not in command, command)
        check(f"quorum compose: {name} keeps all of its data or none",
              redis_persistence_is_all_or_nothing(command), command)
        check(f"quorum compose: {name} has a health check",
              node.get("healthcheck", {}).get("test"))
        data_volumes += [str(v).split(":")[0] for v in node.get("volumes", [])
                         if str(v).endswith(":/data")]
    check("quorum compose: every node keeps its data in a volume of its own",
          len(data_volumes) == len(nodes) == len(set(data_volumes)), str(data_volumes))

    node_lists = []
    for name in brokers:
        broker = services[name]
        env = broker.get("environment", {})
        check(f"quorum compose: {name} runs in quorum mode",
              env.get("LOCKBROKER_REDIS_MODE") == "quorum", str(env.get("LOCKBROKER_REDIS_MODE")))
        urls = [u.strip() for u in str(env.get("LOCKBROKER_REDIS_NODES", "")).split(",")
                if u.strip()]
        hosts = [re.sub(r"^rediss?://(?:[^@/]*@)?([^:/]+).*$", r"\1", u) for u in urls]
        check(f"quorum compose: {name} lists every node once, and only nodes",
              sorted(hosts) == nodes and len(set(urls)) == len(urls), str(urls))
        check(f"quorum compose: {name} has no single-mode redis.url",
              "LOCKBROKER_REDIS_URL" not in env)
        timeout = str(env.get("LOCKBROKER_REDIS_NODE_TIMEOUT_MS", "50"))
        check(f"quorum compose: {name} node timeout is a whole number of ms",
              timeout.isdigit() and int(timeout) > 0, timeout)
        check_broker_env(environment(broker), f"quorum compose: {name}")
        node_lists.append(urls)
        check_broker_service("quorum", name, broker, nodes, "every node")
    check("quorum compose: every broker lists the same nodes in the same order",
          node_lists and all(urls == node_lists[0] for urls in node_lists))

    check_published_ports("quorum", services, brokers)


# -- docker compose, sentinel mode -----------------------------------------------------

def command_text(service: Dict[str, Any]) -> str:
    """A service's command as one string; an empty argument shows as ""."""
    command = service.get("command", [])
    if isinstance(command, str):
        return command
    return " ".join('""' if part == "" else str(part) for part in command)


def redis_flag(command: str, flag: str) -> List[str]:
    """The words after ``--flag`` on a redis-server command line, up to the
    next flag; [] when absent."""
    match = re.search(rf"(?:^|\s)--{re.escape(flag)}((?:\s+(?!--)\S+)*)", command)
    return match.group(1).split() if match else []


def check_sentinel_compose() -> None:
    compose = load_all(DEPLOY / "sentinel" / "docker-compose.yml")[0]
    services: Dict[str, Any] = compose.get("services", {})
    commands = {name: command_text(s) for name, s in services.items()}
    redis = {name for name, s in services.items() if str(s.get("image", "")).startswith("redis:")}
    sentinels = sorted(n for n in redis
                       if re.search(r"(?:^|\s)--sentinel\b|redis-sentinel", commands[n]))
    servers = sorted(redis - set(sentinels))
    brokers = sorted(name for name, s in services.items()
                     if "LOCKBROKER_REDIS_MODE" in environment(s))

    # The Redis servers: one primary, the others its replicas.
    primaries = [n for n in servers
                 if not redis_flag(commands[n], "replicaof") and not redis_flag(commands[n], "slaveof")]
    check("sentinel compose: exactly one primary (a Redis server replicating nothing)",
          len(primaries) == 1, str(primaries))
    primary = primaries[0] if len(primaries) == 1 else None
    primary_port = int((redis_flag(commands.get(primary, ""), "port") or ["6379"])[0])
    replicas = [n for n in servers if n != primary]
    check("sentinel compose: at least one replica", replicas, str(servers))
    data_volumes = []
    for name in servers:
        command = commands[name]
        if primary and name != primary:
            source = redis_flag(command, "replicaof") or redis_flag(command, "slaveof")
            check(f"sentinel compose: {name} replicates {primary}:{primary_port}",
                  source == [str(primary), str(primary_port)], str(source))
        check(f"sentinel compose: {name} keeps all of its data or none",
              redis_persistence_is_all_or_nothing(command), command)
        # Any server can be promoted, so each has the primary's guard: a primary
        # with no replica in sync refuses writes, which bounds how long a
        # partitioned old primary keeps granting. A promoted primary has one
        # replica fewer than there are servers less itself.
        to_write = redis_flag(command, "min-replicas-to-write")
        check(f"sentinel compose: {name} sets min-replicas-to-write (1 to {len(servers) - 2})"
              " and min-replicas-max-lag",
              to_write and to_write[0].isdigit() and 1 <= int(to_write[0]) <= len(servers) - 2
              and redis_flag(command, "min-replicas-max-lag"), command)
        # Sentinel learns replicas by the address they announce, and hands the
        # brokers that: the service name resolves in the compose network.
        check(f"sentinel compose: {name} announces its service name",
              redis_flag(command, "replica-announce-ip") == [name], command)
        check(f"sentinel compose: {name} has a health check",
              services[name].get("healthcheck", {}).get("test"))
        data_volumes += [str(v).split(":")[0] for v in services[name].get("volumes", [])
                         if str(v).endswith(":/data")]
    check("sentinel compose: every Redis server keeps its data in a volume of its own",
          len(data_volumes) == len(servers) == len(set(data_volumes)), str(data_volumes))

    # The Sentinels: a majority of an odd number must agree on the one primary.
    check("sentinel compose: an odd number of Sentinels, at least 3",
          len(sentinels) >= 3 and len(sentinels) % 2 == 1, str(sentinels))
    monitored, sentinel_ports = set(), {}
    for name in sentinels:
        text = commands[name]
        monitors = re.findall(r"sentinel\s+monitor\s+(\S+)\s+(\S+)\s+(\d+)\s+(\d+)", text)
        check(f"sentinel compose: {name} monitors one primary", len(monitors) == 1, str(monitors))
        if not monitors:
            continue
        service, host, port, quorum = monitors[0]
        monitored.add(service)
        check(f"sentinel compose: {name} monitors {primary}:{primary_port}",
              (host, int(port)) == (primary, primary_port), f"{host}:{port}")
        check(f"sentinel compose: {name} quorum is a majority of the Sentinels",
              len(sentinels) // 2 < int(quorum) <= len(sentinels),
              f"quorum {quorum} of {len(sentinels)}")
        for option in ("resolve-hostnames", "announce-hostnames"):
            check(f"sentinel compose: {name} has {option} yes (servers go by name)",
                  re.search(rf"sentinel\s+{option}\s+yes\b", text))
        announce = re.search(r"sentinel\s+announce-ip\s+(\S+)", text)
        env = environment(services[name])
        announced = re.sub(r"^\$\$?\{?(\w+)\}?$", lambda m: env.get(m.group(1), m.group(0)),
                           announce.group(1)) if announce else None
        check(f"sentinel compose: {name} announces its service name", announced == name,
              str(announced))
        port = re.search(r"^\s*port\s+(\d+)", text, re.MULTILINE)
        sentinel_ports[name] = int(port.group(1)) if port else 26379
        check(f"sentinel compose: {name} has a health check",
              services[name].get("healthcheck", {}).get("test"))
    check("sentinel compose: every Sentinel monitors the primary under the same name",
          len(monitored) == 1, str(sorted(monitored)))

    # The brokers: every Sentinel once, only Sentinels, and their service name.
    broker_views = []
    for name, broker, env in brokers_in_mode("sentinel", services, brokers):
        listed = [a.strip() for a in env.get("LOCKBROKER_REDIS_SENTINELS", "").split(",") if a.strip()]
        addresses = [tuple(a.rsplit(":", 1)) for a in listed]
        expected = sorted((n, str(p)) for n, p in sentinel_ports.items())
        check(f"sentinel compose: {name} lists every Sentinel once, and only Sentinels",
              sorted(addresses) == expected and len(set(addresses)) == len(addresses), str(listed))
        service = env.get("LOCKBROKER_REDIS_SERVICE_NAME", "mymaster")
        check(f"sentinel compose: {name} asks for the name the Sentinels monitor",
              monitored == {service}, f"{service} vs {sorted(monitored)}")
        check(f"sentinel compose: {name} has no redis.url (its host would not be used)",
              "LOCKBROKER_REDIS_URL" not in env)
        check_replica_ack(f"sentinel compose: {name}", env, len(servers) - 2,
                          "a promoted primary has")
        check_broker_env(env, f"sentinel compose: {name}")
        broker_views.append((sorted(listed), service))
        check_broker_service("sentinel", name, broker, servers + sentinels,
                             "every Redis server and Sentinel")
    check("sentinel compose: every broker lists the same Sentinels and service name",
          broker_views and all(view == broker_views[0] for view in broker_views))

    check_published_ports("sentinel", services, brokers)


# -- docker compose, cluster mode ------------------------------------------------------

def redis_url_parts(url: str) -> tuple:
    """``(host, port, database)`` of a redis:// or rediss:// URL; the port is
    6379 and the database None when the URL gives none."""
    match = re.match(r"^rediss?://(?:[^@/]*@)?([^:/]+)(?::(\d+))?(?:/(\d*))?$", url)
    if not match:
        return (None, None, None)
    host, port, database = match.groups()
    return (host, int(port or 6379), database or None)


def check_cluster_compose() -> None:
    compose = load_all(DEPLOY / "cluster" / "docker-compose.yml")[0]
    services: Dict[str, Any] = compose.get("services", {})
    commands = {name: command_text(s) for name, s in services.items()}
    creators = sorted(n for n, s in services.items()
                      if re.search(r"--cluster\s+create\b", commands[n]))
    nodes = sorted(n for n, s in services.items()
                   if str(s.get("image", "")).startswith("redis:") and n not in creators)
    brokers = sorted(name for name, s in services.items()
                     if "LOCKBROKER_REDIS_MODE" in environment(s))

    # The Redis servers: each a cluster node whose state and data outlive it.
    node_ports = {}
    data_volumes = []
    for name in nodes:
        command = commands[name]
        node_ports[name] = int((redis_flag(command, "port") or ["6379"])[0])
        check(f"cluster compose: {name} is cluster-enabled",
              redis_flag(command, "cluster-enabled") == ["yes"], command)
        check(f"cluster compose: {name} takes its role from the cluster (no --replicaof)",
              not redis_flag(command, "replicaof") and not redis_flag(command, "slaveof"), command)
        check(f"cluster compose: {name} keeps all of its data or none",
              redis_persistence_is_all_or_nothing(command), command)
        # The cluster names its nodes to clients (CLUSTER SHARDS, MOVED) by
        # what they announce: the service name resolves in the compose network.
        check(f"cluster compose: {name} announces its service name as hostname",
              redis_flag(command, "cluster-announce-hostname") == [name]
              and redis_flag(command, "cluster-preferred-endpoint-type") == ["hostname"], command)
        mounts = {str(v).split(":")[1]: str(v).split(":")[0]
                  for v in services[name].get("volumes", []) if str(v).count(":") >= 1}
        data_volumes += [source for target, source in mounts.items() if target == "/data"]
        config_file = (redis_flag(command, "cluster-config-file") or [""])[0]
        check(f"cluster compose: {name} keeps its cluster state in its data volume",
              config_file.startswith("/data/") and "/data" in mounts,
              f"cluster-config-file {config_file or '(default, in the working directory)'}")
        check(f"cluster compose: {name} has a health check",
              services[name].get("healthcheck", {}).get("test"))
    check("cluster compose: every Redis server keeps its data in a volume of its own",
          len(data_volumes) == len(nodes) == len(set(data_volumes)), str(data_volumes))

    # The create service: every node once, in whole shards of at least three primaries.
    check("cluster compose: exactly one service creates the cluster", len(creators) == 1,
          str(creators))
    creator = creators[0] if len(creators) == 1 else None
    script = commands.get(creator, "")
    create = re.search(r"--cluster\s+create((?:\s+(?!-)\S+)*)", script)
    named = create.group(1).split() if create else []
    addresses = [tuple(a.rsplit(":", 1)) for a in named]
    expected = sorted((n, str(p)) for n, p in node_ports.items())
    check("cluster compose: the create command names every cluster node once, and only them",
          sorted(addresses) == expected and len(set(addresses)) == len(addresses), str(named))
    replicas_flag = re.search(r"--cluster-replicas\s+(\d+)", script)
    replicas = int(replicas_flag.group(1)) if replicas_flag else 0
    primaries = len(nodes) // (replicas + 1)
    check("cluster compose: at least 3 primaries, each with --cluster-replicas replicas",
          len(nodes) >= 3 and primaries >= 3 and len(nodes) == primaries * (replicas + 1),
          f"{len(nodes)} nodes, --cluster-replicas {replicas}")
    check("cluster compose: the create command needs no answer (--cluster-yes)",
          re.search(r"--cluster\s+create\b[^\n]*--cluster-yes\b", script), script)
    # The script looks at every node (cluster_known_nodes) before it creates.
    outside = script[:create.start()] + script[create.end():] if create else script
    unchecked = [n for n in nodes if not re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", outside)]
    check("cluster compose: the create service looks at every node before creating",
          not unchecked, f"not looked at: {unchecked}")
    if creator:
        waits_for = services[creator].get("depends_on", {})
        check(f"cluster compose: {creator} starts once every node is healthy",
              isinstance(waits_for, dict) and all(
                  waits_for.get(n, {}).get("condition") == "service_healthy" for n in nodes))
        check(f"cluster compose: {creator} runs once (no restart policy)",
              str(services[creator].get("restart", "no")) in ("no", "on-failure"),
              str(services[creator].get("restart")))

    # The brokers: cluster mode, seeded only from nodes of this file.
    broker_views = []
    for name, broker, env in brokers_in_mode("cluster", services, brokers):
        urls = [u.strip() for u in env.get("LOCKBROKER_REDIS_NODES", "").split(",") if u.strip()]
        seeds = [redis_url_parts(u) for u in urls]
        check(f"cluster compose: {name} seeds from cluster nodes only, each once",
              seeds and all(host in node_ports and port == node_ports[host]
                            for host, port, _ in seeds)
              and len(set((h, p) for h, p, _ in seeds)) == len(seeds), str(urls))
        check(f"cluster compose: {name} seed URLs name database 0 or none (a cluster has only 0)",
              all(db in (None, "0") for _, _, db in seeds), str(urls))
        check(f"cluster compose: {name} has no single-mode redis.url",
              "LOCKBROKER_REDIS_URL" not in env)
        check_replica_ack(f"cluster compose: {name}", env, replicas, "a primary has")
        check_broker_env(env, f"cluster compose: {name}")
        check_broker_service("cluster", name, broker, nodes, "every cluster node")
        waits_for = broker.get("depends_on", {})
        check(f"cluster compose: {name} starts once {creator} has completed successfully",
              creator and isinstance(waits_for, dict)
              and waits_for.get(creator, {}).get("condition") == "service_completed_successfully")
        broker_views.append((urls, env.get("LOCKBROKER_REDIS_KEY_PREFIX", "lockbroker")))
    check("cluster compose: every broker lists the same seed nodes and key prefix",
          broker_views and all(view == broker_views[0] for view in broker_views))

    check_published_ports("cluster", services, brokers)


# -- Kubernetes ------------------------------------------------------------------------

def check_k8s() -> None:
    k8s = DEPLOY / "k8s"
    objects: Dict[str, Dict[str, Any]] = {}
    for path in sorted(k8s.glob("*.y*ml")):
        for doc in load_all(path):
            kind = doc.get("kind")
            if kind == "Kustomization":
                missing = [r for r in doc.get("resources", []) if not (k8s / r).exists()]
                check("k8s: kustomization lists only existing files", not missing, str(missing))
                listed = set(doc.get("resources", []))
                others = {p.name for p in k8s.glob("*.y*ml")} - {path.name}
                check("k8s: kustomization lists every manifest", others <= listed,
                      str(sorted(others - listed)))
                continue
            ok = doc.get("apiVersion") and kind and doc.get("metadata", {}).get("name")
            check(f"k8s: {path.name} {kind} has apiVersion, kind and metadata.name", ok)
            objects[kind] = doc
    check("k8s: Deployment, Service, ConfigMap and PodDisruptionBudget",
          {"Deployment", "Service", "ConfigMap", "PodDisruptionBudget"} <= set(objects),
          str(sorted(objects)))

    deployment = objects["Deployment"]
    pod = deployment["spec"]["template"]
    pod_labels = pod["metadata"]["labels"]
    selects = lambda selector: selector and all(pod_labels.get(k) == v for k, v in selector.items())
    check("k8s: the Deployment selects its own pods",
          selects(deployment["spec"]["selector"]["matchLabels"]))
    check("k8s: the Service selects the broker pods", selects(objects["Service"]["spec"]["selector"]))
    check("k8s: the PodDisruptionBudget selects the broker pods",
          selects(objects["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"]))
    replicas = deployment["spec"].get("replicas", 1)
    min_available = objects["PodDisruptionBudget"]["spec"].get("minAvailable", 0)
    check("k8s: the PodDisruptionBudget still allows a drain", int(min_available) < replicas,
          f"minAvailable {min_available} of {replicas}")

    spec = pod["spec"]
    container = spec["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        http = container.get(probe, {}).get("httpGet", {})
        check(f"k8s: {probe} is GET {path}", http.get("path") == path, str(http))
        check(f"k8s: {probe} uses a declared port", http.get("port") in ports
              or http.get("port") in ports.values())
    service_ports = objects["Service"]["spec"]["ports"]
    check("k8s: the Service targets the container's port",
          all(p.get("targetPort") in ports or p.get("targetPort") in ports.values()
              for p in service_ports))
    pod_security = spec.get("securityContext", {})
    security = container.get("securityContext", {})
    check("k8s: pods run as non-root", pod_security.get("runAsNonRoot") is True
          and pod_security.get("runAsUser", 0) != 0)
    check("k8s: read-only root filesystem", security.get("readOnlyRootFilesystem") is True)
    check("k8s: no privilege escalation", security.get("allowPrivilegeEscalation") is False)
    check("k8s: all capabilities dropped",
          "ALL" in security.get("capabilities", {}).get("drop", []))
    check("k8s: seccomp RuntimeDefault",
          pod_security.get("seccompProfile", {}).get("type") == "RuntimeDefault")
    check("k8s: memory limit set", container.get("resources", {}).get("limits", {}).get("memory"))

    config_maps = {v["configMap"]["name"] for v in spec.get("volumes", []) if "configMap" in v}
    check("k8s: the ConfigMap the pods mount exists",
          objects["ConfigMap"]["metadata"]["name"] in config_maps, str(config_maps))
    check_broker_settings(objects["ConfigMap"]["data"]["lockbroker.toml"], "k8s ConfigMap")

    env = {e["name"]: e for e in container.get("env", [])}
    check_broker_env({name: str(e.get("value", "")) for name, e in env.items()},
                     "k8s Deployment")
    keys_file = env.get("LOCKBROKER_AUTH_KEYS_FILE", {}).get("value", "")
    mounts = [m["mountPath"] for m in container.get("volumeMounts", [])]
    check("k8s: API keys come from a mounted file (a broker off loopback needs them)",
          keys_file and any(keys_file.startswith(m.rstrip("/") + "/") for m in mounts),
          keys_file or "LOCKBROKER_AUTH_KEYS_FILE not set")


def check_broker_settings(text: str, where: str) -> None:
    """The settings parse as TOML and use only keys config/lockbroker.toml has."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        print(f"skipped: {where} settings (tomllib needs Python 3.11)")
        return
    settings = tomllib.loads(text)
    reference = tomllib.loads((REPO / "config" / "lockbroker.toml").read_text())

    def unknown(table: Dict[str, Any], known: Dict[str, Any], prefix: str = "") -> List[str]:
        found = []
        for key, value in table.items():
            if key not in known:
                found.append(prefix + key)
            elif isinstance(value, dict) and isinstance(known[key], dict):
                found += unknown(value, known[key], f"{prefix}{key}.")
        return found

    bad = unknown(settings, reference)
    check(f"{where}: broker settings use only documented keys", not bad, str(bad))
    check(f"{where}: broker listens on every interface",
          str(settings.get("listen", "")).startswith("0.0.0.0:"))


# -- systemd ---------------------------------------------------------------------------

def check_systemd_unit() -> None:
    unit = (DEPLOY / "systemd" / "lockbroker.service").read_text()
    keys = {}
    for line in unit.splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";")):
            key, _, value = line.partition("=")
            keys.setdefault(key.strip(), value.strip())
    expected = {
        "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
        "PrivateTmp": "yes", "PrivateDevices": "yes", "RestrictNamespaces": "yes",
        "MemoryDenyWriteExecute": "yes", "CapabilityBoundingSet": "",
    }
    wrong = {k: keys.get(k) for k, v in expected.items() if keys.get(k) != v}
    check("systemd: hardening settings", not wrong, str(wrong))
    check("systemd: runs unprivileged", keys.get("DynamicUser") == "yes" or keys.get("User"))
    check("systemd: restarts on failure", keys.get("Restart") in ("on-failure", "always"))


def main() -> int:
    section("YAML", check_yaml_parses)
    section("Dockerfile", check_dockerfile)
    section("docker compose and Prometheus", check_compose)
    section("docker compose, quorum mode", check_quorum_compose)
    section("docker compose, sentinel mode", check_sentinel_compose)
    section("docker compose, cluster mode", check_cluster_compose)
    section("Kubernetes", check_k8s)
    section("systemd", check_systemd_unit)
    print(f"deploy checks: {passes} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
