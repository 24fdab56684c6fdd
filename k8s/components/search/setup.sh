#!/bin/sh
# Run by the elasticsearch-setup Job: the role and user the functions log in as. The index
# template and the per-tenant indices (engram-obs-*) are created by the code itself.
set -eu
auth="elastic:${ELASTIC_PASSWORD:?ELASTIC_PASSWORD is empty}"
: "${ENGRAM_APP_PASSWORD:?ENGRAM_APP_PASSWORD is empty}"

until curl -fsS -u "$auth" "$ELASTICSEARCH/_cluster/health?wait_for_status=yellow&timeout=5s" >/dev/null; do
  echo "waiting for Elasticsearch at $ELASTICSEARCH"
  sleep 5
done

put() {
  curl -fsS -u "$auth" -X PUT "$ELASTICSEARCH/$1" -H 'Content-Type: application/json' --data-binary "$2"
  echo
}

put _security/role/engram_app \
  '{"cluster":["monitor","manage_index_templates"],"indices":[{"names":["engram-*"],"privileges":["all"]}]}'
put _security/user/engram_app "{\"password\":\"${ENGRAM_APP_PASSWORD}\",\"roles\":[\"engram_app\"]}"
echo "elasticsearch-setup: done"
