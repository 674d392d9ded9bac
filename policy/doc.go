// Package policy owns what platform teams declare and the plugin reads: the headroom policy and
// job templates, their validation, the cap formula, their encoding as Nomad Variable items, and
// the stores that hold them (Nomad Variables, a local file).
//
// # Names
//
// A policy or template name is 1-64 letters, digits, '-', '_' or '~' (ValidName, CheckName,
// NameRule), and this package is the only place that rule is written. The name becomes the last
// segment of a Nomad Variable path (gpufrac/policy/<name>, gpufrac/templates/<name>), and Nomad
// accepts only letters, digits, '-', '_', '~' and '/' in a path: no '.', no '@'. The ledger
// stores any non-empty template name, so it does not narrow the rule; Nomad does. A '.' is
// therefore refused everywhere, also where no Nomad is involved (a queue file, a local policy
// file), so that a template named on one machine can be stored in a cluster unchanged. '/' is
// refused too: it would nest the variable one level deeper than the stores look.
package policy
