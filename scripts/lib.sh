# Shared shell helpers for the scripts in this folder. Source it; do not run it.

# Installs Debian packages that are missing, running apt-get update once.
ensure_packages() {
  local missing=()
  for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing: ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

# Fails with a clear message when the Rust toolchain is missing.
ensure_cargo() {
  if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo not found: install Rust first (https://rustup.rs), then rerun" >&2
    exit 1
  fi
}

# Installs cargo-nextest when missing.
ensure_nextest() {
  cargo nextest --version >/dev/null 2>&1 || cargo install cargo-nextest --locked
}

# Whether a Redis answers PING at host:port.
redis_answers() {
  redis-cli -h "$1" -p "$2" ping 2>/dev/null | grep -q PONG
}

# A TCP port on 127.0.0.1 that is free now.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
