package fence

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aegislab/aegis"
)

// ObjectStore is a store of named objects that cannot compare tokens itself
// (a directory, an S3 bucket). Keys are slash-separated paths.
type ObjectStore interface {
	// Put writes the object at key, replacing any object there.
	Put(ctx context.Context, key string, r io.Reader) error
	// Open reads the object at key; an error wrapping fs.ErrNotExist when
	// there is none.
	Open(ctx context.Context, key string) (io.ReadCloser, error)
	// Delete removes the object at key; deleting a missing object is not
	// an error.
	Delete(ctx context.Context, key string) error
	// List returns the keys under prefix, in lexical order.
	List(ctx context.Context, prefix string) ([]string, error)
}

// tokenDigits zero-pads tokens in keys so lexical order is token order.
const tokenDigits = 19

// TokenKey is the key of the object that the holder of token writes for a
// resource: prefix/0000000000000000007.ext. No two grants share it, so a
// stale holder's upload can never overwrite the canonical object that a
// newer holder committed.
//
// The token must be positive; prefix and ext must be UTF-8 without NUL,
// prefix at most MaxResource bytes, ext without '/'. Anything else is an
// error wrapping aegis.ErrInvalid: a key made from token 0 (a token read
// outside a run) would look canonical to nobody and never be swept.
func TokenKey(prefix string, token aegis.Token, ext string) (string, error) {
	if err := validToken(token); err != nil {
		return "", err
	}
	if err := validPrefix(prefix); err != nil {
		return "", err
	}
	ext = strings.TrimPrefix(ext, ".")
	if ext != "" {
		if err := validName("extension", ext); err != nil {
			return "", err
		}
		if strings.IndexByte(ext, '/') >= 0 {
			return "", fmt.Errorf("%w: fence: extension %q contains '/'", aegis.ErrInvalid, ext)
		}
	}
	name := fmt.Sprintf("%0*d", tokenDigits, int64(token))
	if ext != "" {
		name += "." + ext
	}
	return path.Join(prefix, name), nil
}

// validPrefix checks an object key prefix; empty means the store's root.
func validPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return validName("prefix", prefix)
}

// KeyToken returns the token in a key made by TokenKey.
func KeyToken(key string) (aegis.Token, bool) {
	base := path.Base(key)
	if i := strings.IndexByte(base, '.'); i >= 0 {
		base = base[:i]
	}
	if len(base) != tokenDigits {
		return 0, false
	}
	n, err := strconv.ParseInt(base, 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	return aegis.Token(n), true
}

// Sweep deletes the token-keyed objects under prefix that can never become
// canonical: those whose token is below the resource's current token (a
// stale holder's upload, which the fence will refuse) and that no row
// references. Objects of the current or a greater token are kept, because
// their holder may still commit them. It returns the keys deleted.
//
// A nil store or referenced, a current token that is not positive or a
// prefix TokenKey would refuse is an error wrapping aegis.ErrInvalid.
func Sweep(ctx context.Context, store ObjectStore, prefix string, current aegis.Token, referenced func(key string) bool) ([]string, error) {
	switch {
	case store == nil:
		return nil, fmt.Errorf("%w: fence: sweep: store is nil", aegis.ErrInvalid)
	case referenced == nil:
		return nil, fmt.Errorf("%w: fence: sweep: referenced is nil", aegis.ErrInvalid)
	}
	if err := validToken(current); err != nil {
		return nil, err
	}
	if err := validPrefix(prefix); err != nil {
		return nil, err
	}
	keys, err := store.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("fence: sweep %q: %w", prefix, err)
	}
	var deleted []string
	for _, key := range keys {
		token, ok := KeyToken(key)
		if !ok || token >= current || referenced(key) {
			continue
		}
		if err := store.Delete(ctx, key); err != nil {
			return deleted, fmt.Errorf("fence: sweep %q: %w", key, err)
		}
		deleted = append(deleted, key)
	}
	return deleted, nil
}

// Dir is an ObjectStore in a directory of the local file system. Put is
// atomic: a reader sees the old object or the whole new one.
type Dir struct {
	root string
}

var _ ObjectStore = (*Dir)(nil)

// NewDir returns a Dir rooted at root, creating the directory when missing.
func NewDir(root string) (*Dir, error) {
	if root == "" {
		return nil, fmt.Errorf("%w: fence: object directory is empty", aegis.ErrInvalid)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("fence: %w", err)
	}
	return &Dir{root: root}, nil
}

// file maps a key to a path under root, refusing keys that would escape it
// or that no file system names.
func (d *Dir) file(key string) (string, error) {
	if err := validName("object key", key); err != nil {
		return "", err
	}
	if !fs.ValidPath(key) || key == "." {
		return "", fmt.Errorf("%w: fence: invalid object key %q: not a relative slash-separated path", aegis.ErrInvalid, key)
	}
	return filepath.Join(d.root, filepath.FromSlash(key)), nil
}

// Put writes r to key through a temporary file and a rename.
func (d *Dir) Put(ctx context.Context, key string, r io.Reader) (err error) {
	name, err := d.file(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return fmt.Errorf("fence: put %q: %w", key, err)
	}
	f, err := os.CreateTemp(filepath.Dir(name), ".put-*")
	if err != nil {
		return fmt.Errorf("fence: put %q: %w", key, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err := io.Copy(f, readerCtx{ctx, r}); err != nil {
		return fmt.Errorf("fence: put %q: %w", key, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fence: put %q: %w", key, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("fence: put %q: %w", key, err)
	}
	if err := os.Rename(f.Name(), name); err != nil {
		return fmt.Errorf("fence: put %q: %w", key, err)
	}
	return nil
}

// Open opens the object at key.
func (d *Dir) Open(_ context.Context, key string) (io.ReadCloser, error) {
	name, err := d.file(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("fence: open %q: %w", key, err)
	}
	return f, nil
}

// Delete removes the object at key.
func (d *Dir) Delete(_ context.Context, key string) error {
	name, err := d.file(key)
	if err != nil {
		return err
	}
	if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("fence: delete %q: %w", key, err)
	}
	return nil
}

// List returns the keys under prefix (a directory prefix), in lexical order.
func (d *Dir) List(_ context.Context, prefix string) ([]string, error) {
	var keys []string
	root := d.root
	if prefix != "" {
		name, err := d.file(prefix)
		if err != nil {
			return nil, err
		}
		root = name
	}
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == root {
				return fs.SkipAll
			}
			return err
		}
		if e.IsDir() || strings.HasPrefix(e.Name(), ".put-") {
			return nil
		}
		rel, err := filepath.Rel(d.root, p)
		if err != nil {
			return err
		}
		keys = append(keys, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("fence: list %q: %w", prefix, err)
	}
	return keys, nil
}

// readerCtx stops a copy when ctx ends.
type readerCtx struct {
	ctx context.Context
	r   io.Reader
}

func (r readerCtx) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}
