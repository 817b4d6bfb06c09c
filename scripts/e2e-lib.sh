# Shared helpers for scripts/e2e-*.sh (sourced, not run).
# The recipe hash MUST stay in step with e2e/harness/images.go (recipeHash):
# sha256 over `sha256sum` lines of scripts/e2e-images.sh then every file under
# e2e/images in byte order, first 12 hex digits.

e2e_recipe_hash() {
	{
		echo scripts/e2e-images.sh
		find e2e/images -type f | LC_ALL=C sort
	} | while read -r f; do sha256sum "$f"; done | sha256sum | cut -c1-12
}

e2e_rabbitmq_image() { echo "${SCOUR_E2E_RABBITMQ_IMAGE:-localhost/scour-e2e-rabbitmq:$(e2e_recipe_hash)}"; }
e2e_glance_image() { echo "${SCOUR_E2E_GLANCE_IMAGE:-localhost/scour-e2e-glance:$(e2e_recipe_hash)}"; }
e2e_keystone_image() { echo "${SCOUR_E2E_KEYSTONE_IMAGE:-localhost/scour-e2e-keystone:$(e2e_recipe_hash)}"; }
e2e_placement_image() { echo "${SCOUR_E2E_PLACEMENT_IMAGE:-localhost/scour-e2e-placement:$(e2e_recipe_hash)}"; }

# The Debian mirror this machine's apt uses (first non-security entry), so
# debootstrap fetches from the same place apt-get does.
e2e_debian_mirror() {
	if [ -n "${SCOUR_E2E_DEBIAN_MIRROR:-}" ]; then echo "$SCOUR_E2E_DEBIAN_MIRROR"; return; fi
	local m
	m=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null |
		grep -v '^[[:space:]]*#' |
		grep -oE 'https?://[^ ]*/debian/?( |$)' | grep -v security | head -1 | tr -d ' ')
	echo "${m:-http://deb.debian.org/debian}"
}
