# Makes sure PostgreSQL answers on 127.0.0.1:5432 as user postgres with a
# database named test and no password, as the lost-update lab expects.
# Source it after lib.sh; then call ensure_postgres. Needs root to install.

PG_CONN="host=127.0.0.1 port=5432 user=postgres dbname=test"

pg_usable() {
  command -v psql >/dev/null 2>&1 && psql "$PG_CONN" -Atqc 'select 1' >/dev/null 2>&1
}

as_postgres() {
  runuser -u postgres -- "$@"
}

ensure_postgres() {
  pg_usable && return 0
  ensure_packages postgresql postgresql-client
  if ! pg_isready -h 127.0.0.1 -p 5432 -q; then
    echo "starting PostgreSQL" >&2
    service postgresql start >/dev/null 2>&1 || {
      local version
      version="$(ls /etc/postgresql | sort -V | tail -1)"
      pg_ctlcluster "$version" main start
    }
    for _ in $(seq 1 60); do
      pg_isready -h 127.0.0.1 -p 5432 -q && break
      sleep 0.5
    done
  fi
  # A fresh Debian cluster asks for a password over TCP: trust loopback
  # connections of the postgres user, which is what the lab uses.
  if ! psql "host=127.0.0.1 port=5432 user=postgres dbname=postgres" -Atqc 'select 1' >/dev/null 2>&1; then
    local hba
    hba="$(as_postgres psql -Atqc 'show hba_file')"
    sed -i '1i host all postgres 127.0.0.1/32 trust' "$hba"
    as_postgres psql -Atqc 'select pg_reload_conf()' >/dev/null
  fi
  if ! as_postgres psql -Atqc "select 1 from pg_database where datname = 'test'" | grep -q 1; then
    as_postgres createdb test
  fi
  pg_usable || {
    echo "PostgreSQL is not usable at $PG_CONN" >&2
    exit 1
  }
}
