// Package browsertest checks a report as a person sees it, for the tests of report/ and
// runner/: headless Chromium (Debian's chromium package, which scripts/install-tools.sh
// installs) loads a page, a check script records what it drew, and a screenshot is kept. CI
// sets GPUFRAC_REQUIRE_CHROMIUM=1 so that a missing browser fails instead of skipping.
package browsertest
