package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
)

// jwk is one key of a JSON Web Key Set (RFC 7517), public parts only.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// publicKey is a verification key with the algorithm its JWK names ("" when
// it names none).
type publicKey struct {
	key crypto.PublicKey
	alg string
}

// parseJWKS turns a key set into keys by kid. Keys of other types or uses
// (encryption), and private material, are skipped; a set without one usable
// key is an error.
func parseJWKS(data []byte) (map[string]publicKey, error) {
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("JWKS is not JSON: %w", err)
	}
	keys := map[string]publicKey{}
	for _, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		pk, err := k.public()
		if err != nil {
			continue
		}
		keys[k.Kid] = publicKey{key: pk, alg: k.Alg}
	}
	if len(keys) == 0 {
		return nil, errors.New("JWKS has no usable signing key (RSA, EC P-256 or Ed25519)")
	}
	return keys, nil
}

func b64(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }

func (k jwk) public() (crypto.PublicKey, error) {
	switch k.Kty {
	case "RSA":
		n, err1 := b64(k.N)
		e, err2 := b64(k.E)
		if err1 != nil || err2 != nil || len(n) < 256 || len(e) == 0 || len(e) > 4 {
			return nil, errors.New("bad RSA key (at least 2048 bits)")
		}
		exp := int(new(big.Int).SetBytes(e).Int64())
		if exp < 3 {
			return nil, errors.New("bad RSA exponent")
		}
		return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: exp}, nil
	case "EC":
		if k.Crv != "P-256" {
			return nil, errors.New("only P-256 EC keys")
		}
		x, err1 := b64(k.X)
		y, err2 := b64(k.Y)
		if err1 != nil || err2 != nil || len(x) != 32 || len(y) != 32 {
			return nil, errors.New("bad EC key")
		}
		// Through the uncompressed encoding, which checks the point is on
		// the curve.
		raw := append(append([]byte{4}, x...), y...)
		pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), raw)
		if err != nil {
			return nil, err
		}
		return pub, nil
	case "OKP":
		x, err := b64(k.X)
		if k.Crv != "Ed25519" || err != nil || len(x) != ed25519.PublicKeySize {
			return nil, errors.New("only Ed25519 OKP keys")
		}
		return ed25519.PublicKey(x), nil
	}
	return nil, errors.New("unsupported key type")
}
