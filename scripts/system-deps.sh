#!/usr/bin/env bash
# Installs the Debian packages no wheel provides: a Java runtime for Spark, the
# PostgreSQL JDBC driver, headless Chromium for the status-page test, and Mosquitto, which
# the MQTT outage tests start privately on a free port (and stop and restart).
# Does nothing when they are already there.
set -euo pipefail
need=()
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
[ -f /usr/share/java/postgresql.jar ] || need+=(libpostgresql-jdbc-java)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || need+=(mosquitto)
# the Alertmanager sink's tests run a real Alertmanager; the rule and dashboard tests run promtool
command -v prometheus-alertmanager >/dev/null 2>&1 || need+=(prometheus-alertmanager)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "missing Debian packages: ${need[*]}; run: sudo apt-get install -y ${need[*]}" >&2
  exit 1
fi
echo "installing ${need[*]} (for the Spark jobs, the status-page test and the MQTT tests)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${need[@]}" >/dev/null
