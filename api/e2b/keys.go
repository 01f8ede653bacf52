package e2b

import (
	"crypto/sha256"
	"crypto/subtle"
)

// Keys admits E2B API keys: the node's tokens file, each token an owner.
type Keys struct {
	sums   [][sha256.Size]byte
	owners []uint32
}

// NewKeys keeps tokens (token to owner uid) as hashes.
func NewKeys(tokens map[string]uint32) *Keys {
	k := &Keys{}
	for tok, owner := range tokens {
		k.sums = append(k.sums, sha256.Sum256([]byte(tok)))
		k.owners = append(k.owners, owner)
	}
	return k
}

// Owner is key's owner. Hashes are compared with every entry and no early
// exit, so the time taken says nothing of how much of a key matched
// (timing attack on the key).
func (k *Keys) Owner(key string) (uint32, bool) {
	sum := sha256.Sum256([]byte(key))
	var owner uint32
	found := 0
	for i, s := range k.sums {
		eq := subtle.ConstantTimeCompare(sum[:], s[:])
		owner = uint32(subtle.ConstantTimeSelect(eq, int(k.owners[i]), int(owner)))
		found |= eq
	}
	return owner, found == 1
}
