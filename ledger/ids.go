package ledger

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrInstanceID is wrapped by every error about a malformed instance ID.
var ErrInstanceID = errors.New("malformed instance ID")

// InstanceID names unit k of the GPU with this UUID: "<uuid>-<k>". It depends on nothing but the
// UUID and k, so an ID means the same unit across restarts and policy changes, which is what lets
// Nomad keep running allocations attached to it.
func InstanceID(uuid string, k int) string {
	return uuid + "-" + strconv.Itoa(k)
}

// ParseInstanceID splits an ID made by InstanceID. Only the canonical form is accepted (no sign,
// no leading zeros), so two different strings never name the same unit.
func ParseInstanceID(id string) (uuid string, k int, err error) {
	i := strings.LastIndexByte(id, '-')
	if i <= 0 || i == len(id)-1 {
		return "", 0, fmt.Errorf("%w %q: want <gpu-uuid>-<unit number>", ErrInstanceID, id)
	}
	num := id[i+1:]
	for _, c := range num {
		if c < '0' || c > '9' {
			return "", 0, fmt.Errorf("%w %q: unit number %q is not a non-negative integer", ErrInstanceID, id, num)
		}
	}
	if len(num) > 1 && num[0] == '0' {
		return "", 0, fmt.Errorf("%w %q: unit number %q has a leading zero", ErrInstanceID, id, num)
	}
	k, err = strconv.Atoi(num)
	if err != nil || k > maxUnitNumber {
		return "", 0, fmt.Errorf("%w %q: unit number %q is too large", ErrInstanceID, id, num)
	}
	return id[:i], k, nil
}

// maxUnitNumber bounds k far above any real GPU (64 TiB at the smallest 64 MiB unit is 2^20
// units) so arithmetic on k never overflows.
const maxUnitNumber = 1 << 24

// RedactToken is the part of a secret reservation token that may appear in logs, errors and
// events: enough to tell reservations apart, too little to act as one. Every package that prints
// a token prints this, so one reservation reads the same in the ledger's, the enforcer's and the
// plugin's lines.
func RedactToken(token string) string {
	if len(token) > 8 {
		return token[:8] + "…"
	}
	return token
}
