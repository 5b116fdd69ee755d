#!/usr/bin/env bash
# The kill campaign, long form: TRIALS (default 100) trials per host
# transport (tcp, shared memory), 4 ranks each, one rank killed with
# SIGKILL at a random moment. Prints a table of hangs, panics, wrong
# results, the survivors' errors and their times; the output of any bad
# trial is kept in a folder it names. docs/reliability.md has the figures.
#
#   scripts/campaign.sh [TRIALS]
#
# CAMPAIGN_SEED (the first trial's seed; default: from the clock),
# CAMPAIGN_MAXKILL (the latest kill after the ranks are ready; default 2s)
# and CAMPAIGN_HANG (how long a survivor may take to end; default 10s)
# adjust it. Run it under nice on a shared machine: nice -n 19 scripts/campaign.sh
set -euo pipefail
cd "$(dirname "$0")/.."
trials=${1:-100}
dir=$(mktemp -d "${TMPDIR:-/tmp}/courier-campaign.XXXXXX")
go test -c -o "$dir/campaign.test" ./internal/campaign
echo "campaign: $trials trials per transport; $(nproc) cores, $(uname -sr), $(date -u +%Y-%m-%dT%H:%MZ); bad trials kept in $dir"
status=0
"$dir/campaign.test" -test.run '^TestKillCampaign$' -test.timeout 0 \
  -campaign.trials "$trials" -campaign.seed "${CAMPAIGN_SEED:-0}" \
  -campaign.maxkill "${CAMPAIGN_MAXKILL:-2s}" -campaign.hang "${CAMPAIGN_HANG:-10s}" \
  -campaign.dir "$dir" -campaign.table | grep -v -e '^PASS$' -e '^FAIL$' -e '^--- FAIL' || status=$?
rm -f "$dir/campaign.test"
rmdir "$dir" 2>/dev/null || true
exit $status
