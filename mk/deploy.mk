# Deploy files (deploy/): the Prometheus alert rules are checked and unit
# tested with promtool (Debian's prometheus package, installed when
# missing); the Go tests check rules, dashboard and manifests against the
# code.
.PHONY: test-rules
test: test-rules

test-rules:
	bash scripts/ensure-debian-tools.sh promtool systemd-analyze sqlite3
	promtool check rules deploy/prometheus/scour-alerts.yaml
	cd deploy/prometheus && promtool test rules scour-alerts.test.yaml
