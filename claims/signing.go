package claims

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Signer is a host's record-signing key (Ed25519). Every record scourd
// closes is signed with it and carries the hash of the host's previous
// record, so a changed, dropped or re-signed record is detectable
// (scourctl records verify).
type Signer struct {
	priv ed25519.PrivateKey
	pub  ed25519.PublicKey
}

// PublicKey returns the verifying half.
func (s *Signer) PublicKey() ed25519.PublicKey { return s.pub }

// KeyID names a public key: "sha256:" and the hex SHA-256 of its bytes.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// KeyFiles says what LoadOrCreateKey did with the key files, for the log.
type KeyFiles struct {
	Created bool   // the key was created (first start, or after it was removed)
	PubPath string // path+".pub", the public key operators archive
	// PubWritten: PubPath was (re)written because it was missing, did not
	// parse, or held another key than the loaded one.
	PubWritten bool
	// OldPub is where PubPath's previous content was kept, when it held
	// another key (path+".pub.<hex of its key id>") or did not parse
	// (path+".pub.invalid"); OldKeyID is that other key's id.
	OldPub, OldKeyID string
	// PubErr: PubPath should have been rewritten but could not be (a
	// read-only directory, a Secret mount): signing works, and the
	// caller warns that the public key file is missing or stale.
	PubErr error
}

// LoadOrCreateKey reads the host's signing key from path (PEM, PKCS #8),
// creating it (mode 0600, directory 0700) on first start. It keeps the
// public key in path+".pub" (mode 0644) true to the loaded key: when that
// file is missing, does not parse, or holds another key (the key was
// recreated), it is rewritten atomically, and the old one is kept beside
// it (KeyFiles says where). A key file readable by group or others is
// refused.
func LoadOrCreateKey(path string) (*Signer, KeyFiles, error) {
	kf := KeyFiles{PubPath: path + ".pub"}
	data, err := os.ReadFile(path)
	var s *Signer
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s, err = createKey(path)
		kf.Created = true
	case err != nil:
		return nil, KeyFiles{}, fmt.Errorf("record signing key %s: %w", path, err)
	default:
		s, err = loadKey(path, data)
	}
	if err != nil {
		return nil, KeyFiles{}, err
	}
	if err := kf.syncPub(s.pub); err != nil {
		// Not fatal: the key signs; only the copy operators archive is off.
		kf.PubErr = fmt.Errorf("public key %s: %w", kf.PubPath, err)
	}
	return s, kf, nil
}

// syncPub makes kf.PubPath hold pub: a file that holds it already (alone,
// or in a bundle with older keys an operator keeps there) is left as it
// is; any other is rewritten to hold pub alone.
func (kf *KeyFiles) syncPub(pub ed25519.PublicKey) error {
	old, err := os.ReadFile(kf.PubPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err == nil {
		keys, perr := ParsePublicKeyPEM(old)
		switch {
		case perr == nil && slices.ContainsFunc(keys, func(k ed25519.PublicKey) bool { return k.Equal(pub) }):
			return nil
		case perr != nil:
			kf.OldPub = kf.PubPath + ".invalid"
		default:
			for _, k := range keys {
				if !k.Equal(pub) {
					kf.OldKeyID = KeyID(k)
					break
				}
			}
			if kf.OldKeyID != "" {
				kf.OldPub = kf.PubPath + "." + strings.TrimPrefix(kf.OldKeyID, "sha256:")
			}
		}
		if kf.OldPub != "" {
			if err := writeFileAtomic(kf.OldPub, old, 0o644); err != nil {
				return fmt.Errorf("keeping the old public key as %s: %w", kf.OldPub, err)
			}
		}
	}
	kf.PubWritten = true
	return writeFileAtomic(kf.PubPath, PublicKeyPEM(pub), 0o644)
}

// writeFileAtomic replaces path with data: a temporary file beside it,
// synced and renamed over it, so a reader sees the old or the new file.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

func createKey(path string) (*Signer, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("record signing key: directory of %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("record signing key: creating %s: %w", path, err)
	}
	err = pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("record signing key: writing %s: %w", path, err)
	}
	return &Signer{priv: priv, pub: pub}, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// LoadKey reads the host's signing key from path as LoadOrCreateKey does,
// for a tool that closes records with scourd stopped (scourctl host
// adopt): it neither creates the key nor writes its public key file, and
// ok is false when there is none (scourd creates it at its first start).
func LoadKey(path string) (s *Signer, ok bool, err error) {
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("record signing key %s: %w", path, err)
	}
	s, err = loadKey(path, data)
	return s, err == nil, err
}

func loadKey(path string, data []byte) (*Signer, error) {
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("record signing key %s has mode %04o: anyone who reads it can forge records; chmod 600 it (and consider it compromised)", path, fi.Mode().Perm())
	}
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("record signing key %s: not a PEM \"PRIVATE KEY\" block", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("record signing key %s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("record signing key %s: a %T, want Ed25519", path, k)
	}
	return &Signer{priv: priv, pub: priv.Public().(ed25519.PublicKey)}, nil
}

// PublicKeyPEM encodes a public key as PEM (PKIX "PUBLIC KEY").
func PublicKeyPEM(pub ed25519.PublicKey) []byte {
	der, _ := x509.MarshalPKIXPublicKey(pub)
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// ParsePublicKeyPEM reads the Ed25519 keys in PEM data (one or more
// "PUBLIC KEY" blocks).
func ParsePublicKeyPEM(data []byte) ([]ed25519.PublicKey, error) {
	var out []ed25519.PublicKey
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "PUBLIC KEY" {
			continue
		}
		k, err := x509.ParsePKIXPublicKey(b.Bytes)
		if err != nil {
			return nil, err
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("a %T public key, want Ed25519", k)
		}
		out = append(out, pub)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM \"PUBLIC KEY\" block")
	}
	return out, nil
}
