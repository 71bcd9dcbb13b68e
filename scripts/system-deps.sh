#!/usr/bin/env bash
# Installs the Debian packages no wheel provides (README, "The two commands", lists them):
# a Java runtime for Spark and Apache Kafka, Maven (fetches Kafka's jars), the PostgreSQL JDBC driver, headless Chromium for the
# status-page test, Mosquitto (the MQTT outage tests start it privately on a free port) and
# its clients (`mosquitto_sub`, which the demo suggests), Alertmanager and promtool for the
# sink and rule tests. Does nothing when they are already there. Waits (up to
# LOCK_WAIT_S seconds, saying so every 10 s) for another apt/dpkg run that holds the lock.
set -euo pipefail
LOCK_WAIT_S=${LAGD_APT_LOCK_WAIT_S:-300}
LOCKS=(/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock)

need=()
why=()
want() { need+=("$1"); why+=("$1 ($2)"); }
command -v java >/dev/null 2>&1 || want default-jdk-headless "Java for the Spark jobs and Apache Kafka"
command -v mvn >/dev/null 2>&1 || want maven "fetches Apache Kafka's jars from Maven Central for the tests"
[ -f /usr/share/java/postgresql.jar ] || want libpostgresql-jdbc-java "PostgreSQL JDBC driver for the Spark jobs"
command -v chromium >/dev/null 2>&1 || want chromium "headless browser for the status-page test"
command -v chromedriver >/dev/null 2>&1 || want chromium-driver "drives the browser in the status-page test"
command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || want mosquitto "MQTT broker for the MQTT tests"
command -v mosquitto_sub >/dev/null 2>&1 || want mosquitto-clients "mosquitto_sub, to watch the demo's incidents"
# the Alertmanager sink's tests run a real Alertmanager; the rule and dashboard tests run promtool
command -v prometheus-alertmanager >/dev/null 2>&1 || want prometheus-alertmanager "Alertmanager for the sink tests"
command -v promtool >/dev/null 2>&1 || want prometheus "promtool for the rule tests"
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "missing Debian packages: ${need[*]}; run: sudo apt-get install -y ${need[*]}" >&2
  exit 1
fi

lock_holders() {
  # PIDs holding apt's or dpkg's locks (fuser prints them); nothing when the locks are free.
  command -v fuser >/dev/null 2>&1 || return 0
  fuser "${LOCKS[@]}" 2>/dev/null | tr -s ' ' '\n' | grep -E '^[0-9]+$' | sort -u || true
}

wait_for_apt() {
  local waited=0 holders
  while holders=$(lock_holders) && [ -n "$holders" ]; do
    if [ "$waited" -ge "$LOCK_WAIT_S" ]; then
      echo "another apt/dpkg run (pid $(echo $holders)) still holds the package lock after ${LOCK_WAIT_S}s;" \
        "let it finish (or stop it), then run make again" >&2
      exit 1
    fi
    if [ $((waited % 10)) -eq 0 ]; then
      echo "waiting for another apt/dpkg run to finish: pid $(echo $holders) ($(ps -o comm= -p $(echo $holders | cut -d' ' -f1) 2>/dev/null || echo '?')), ${waited}s of ${LOCK_WAIT_S}s"
    fi
    sleep 1
    waited=$((waited + 1))
  done
}

echo "installing Debian packages:"
printf '  %s\n' "${why[@]}"
export DEBIAN_FRONTEND=noninteractive
wait_for_apt
# The timeout also covers a run that takes the lock between the check above and apt's own start.
apt-get -o DPkg::Lock::Timeout="$LOCK_WAIT_S" update -q
wait_for_apt
apt-get -o DPkg::Lock::Timeout="$LOCK_WAIT_S" install -y -q --no-install-recommends "${need[@]}"
echo "installed: ${need[*]}"
