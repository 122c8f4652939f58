#!/bin/sh
# Entry point of the yarilo-lab-mariadb stand-in: the public mariadb image's
# environment interface, the part yarilo's Compose files and tests use.
#   MARIADB_ROOT_PASSWORD (or MARIADB_ALLOW_EMPTY_ROOT_PASSWORD=1 /
#   MARIADB_RANDOM_ROOT_PASSWORD=1), MARIADB_DATABASE, MARIADB_USER,
#   MARIADB_PASSWORD (MYSQL_* spellings accepted), and
#   /docker-entrypoint-initdb.d/*.sql run once into MARIADB_DATABASE.
# On first start (no system tables in the data directory) it creates them
# with `mariadbd --bootstrap`, as mariadb-install-db does; then it execs the
# server. Any command other than `mariadbd ...` is executed as given.
set -eu

if [ "${1:-mariadbd}" != mariadbd ] && [ "${1#-}" = "$1" ]; then
  exec "$@"
fi
[ "${1:-}" = mariadbd ] && shift

DATADIR=/var/lib/mysql
SHARE=/usr/share/mysql

env_or() { # NAME FALLBACK_NAME
  eval "v=\${$1:-}"
  [ -n "$v" ] || eval "v=\${$2:-}"
  printf '%s' "$v"
}
# SQL string literal: backslashes and quotes escaped.
sql_str() { printf "'%s'" "$(printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e "s/'/\\\\'/g")"; }
# SQL identifier.
sql_id() { printf '`%s`' "$(printf '%s' "$1" | sed -e 's/`/``/g')"; }

ROOT_PW=$(env_or MARIADB_ROOT_PASSWORD MYSQL_ROOT_PASSWORD)
ALLOW_EMPTY=$(env_or MARIADB_ALLOW_EMPTY_ROOT_PASSWORD MYSQL_ALLOW_EMPTY_PASSWORD)
RANDOM_ROOT=$(env_or MARIADB_RANDOM_ROOT_PASSWORD MYSQL_RANDOM_ROOT_PASSWORD)
DATABASE=$(env_or MARIADB_DATABASE MYSQL_DATABASE)
USER_NAME=$(env_or MARIADB_USER MYSQL_USER)
USER_PW=$(env_or MARIADB_PASSWORD MYSQL_PASSWORD)

if [ ! -d "$DATADIR/mysql" ]; then
  if [ -z "$ROOT_PW" ] && [ -z "$ALLOW_EMPTY" ] && [ -z "$RANDOM_ROOT" ]; then
    echo "docker-entrypoint: set MARIADB_ROOT_PASSWORD, MARIADB_ALLOW_EMPTY_ROOT_PASSWORD=1 or MARIADB_RANDOM_ROOT_PASSWORD=1" >&2
    exit 1
  fi
  if [ -n "$RANDOM_ROOT" ]; then
    ROOT_PW=$(head -c 18 /dev/urandom | sed 's/[^A-Za-z0-9]//g')x
    echo "docker-entrypoint: GENERATED ROOT PASSWORD: $ROOT_PW"
  fi
  echo "docker-entrypoint: initialising $DATADIR"
  {
    echo "CREATE DATABASE IF NOT EXISTS mysql;"
    echo "USE mysql;"
    echo "SET @auth_root_socket=NULL;"
    cat "$SHARE/mysql_system_tables.sql" "$SHARE/mysql_performance_tables.sql" \
      "$SHARE/mysql_system_tables_data.sql" "$SHARE/maria_add_gis_sp_bootstrap.sql" \
      "$SHARE/mysql_sys_schema.sql"
    # Root from anywhere (a container's clients are on its network).
    echo "DELETE FROM mysql.global_priv WHERE user='root' AND host NOT IN ('localhost');"
    echo "DELETE FROM mysql.proxies_priv WHERE host NOT IN ('localhost');"
    echo "FLUSH PRIVILEGES;"
    echo "ALTER USER 'root'@'localhost' IDENTIFIED BY $(sql_str "$ROOT_PW");"
    echo "CREATE USER 'root'@'%' IDENTIFIED BY $(sql_str "$ROOT_PW");"
    echo "GRANT ALL ON *.* TO 'root'@'%' WITH GRANT OPTION;"
    if [ -n "$DATABASE" ]; then
      echo "CREATE DATABASE IF NOT EXISTS $(sql_id "$DATABASE");"
    fi
    if [ -n "$USER_NAME" ]; then
      echo "CREATE USER $(sql_str "$USER_NAME")@'%' IDENTIFIED BY $(sql_str "$USER_PW");"
      if [ -n "$DATABASE" ]; then
        echo "GRANT ALL ON $(sql_id "$DATABASE").* TO $(sql_str "$USER_NAME")@'%';"
      fi
    fi
    for f in /docker-entrypoint-initdb.d/*.sql; do
      [ -e "$f" ] || continue
      echo "docker-entrypoint: running $f" >&2
      if [ -n "$DATABASE" ]; then echo "USE $(sql_id "$DATABASE");"; fi
      cat "$f"
      echo
    done
  } | mariadbd --bootstrap --datadir="$DATADIR" --log-warnings=0 \
      --enforce-storage-engine="" --max_allowed_packet=64M --net_buffer_length=16K
  echo "docker-entrypoint: initialised"
fi

exec mariadbd --datadir="$DATADIR" --bind-address=0.0.0.0 --skip-name-resolve \
  --socket=/run/mysqld/mysqld.sock "$@"
