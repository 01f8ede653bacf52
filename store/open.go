package store

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// DefaultURL is the store of a node with no configuration: persisted
// workspaces in a local directory.
const DefaultURL = "file:///var/lib/jailcell/store"

// DefaultTimeout bounds each store request (plus a second per MiB moved).
const DefaultTimeout = 30 * time.Second

// Options opens a store.
type Options struct {
	// URL is file:///ABS/DIR or s3://BUCKET[/PREFIX]. Default DefaultURL.
	URL string
	// Shared: a file store other nodes use too (an NFS mount, or several
	// daemons of one host); S3 stores are always shared.
	Shared bool
	// Timeout bounds each request. Default DefaultTimeout.
	Timeout time.Duration
	S3      S3Options
	// KeyFile is the fleet key file (store.key_file, ParseKeyring's
	// format): every object is then signed and verified (Sign). A shared
	// store without one is refused: anyone who can write it could hand
	// this node sessions, owners and files. "" none.
	KeyFile string
	// Keys is the keyring itself, in place of KeyFile (tests, or a caller
	// that read it already).
	Keys *Keyring
}

// S3Options is an S3 store's endpoint. Credentials are never part of the
// configuration: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and
// AWS_SESSION_TOKEN), else the AWS shared credentials file.
type S3Options struct {
	// Endpoint is http(s)://HOST[:PORT]. Required.
	Endpoint string
	// Region, e.g. us-east-1 ("" lets the client ask the server).
	Region string
	// CredentialsFile is an AWS shared credentials file; "" is
	// AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials.
	CredentialsFile string
	// Profile in that file; "" is AWS_PROFILE, else "default".
	Profile string
}

// Open opens the store opts.URL names. It does not contact an S3 server:
// a store that is down at start makes the operations that need it fail,
// not the daemon.
func Open(opts Options) (Store, error) {
	st, err := openRaw(opts)
	if err != nil {
		return nil, err
	}
	keys := opts.Keys
	if keys == nil && opts.KeyFile != "" {
		if keys, err = LoadKeyring(opts.KeyFile); err != nil {
			return nil, err
		}
	}
	if keys == nil {
		if st.Shared() {
			// Store attack: a shared store that is trusted unsigned lets anyone
			// with its credentials forge sessions, owners and host paths.
			return nil, fmt.Errorf("store %s is shared (other nodes, and anyone with its credentials, write it): set store.key_file to the fleet key file so every object is signed and checked (docs/store.md, \"The fleet key\")", st.Name())
		}
		return st, nil
	}
	return Sign(st, keys), nil
}

// openRaw opens the store without signatures.
func openRaw(opts Options) (Store, error) {
	if opts.URL == "" {
		opts.URL = DefaultURL
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	u, err := url.Parse(opts.URL)
	if err != nil {
		return nil, fmt.Errorf("store.url %q: %w", opts.URL, err)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("store.url %q: no user, query or fragment allowed (credentials come from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a credentials file)", redact(u))
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("store.url %q: want file:///ABSOLUTE/DIR", opts.URL)
		}
		if u.Path == "" || !filepath.IsAbs(u.Path) || filepath.Clean(u.Path) != u.Path {
			return nil, fmt.Errorf("store.url %q: want file:///ABSOLUTE/DIR, a clean absolute path", opts.URL)
		}
		return openFile(u.Path, opts.Shared, opts.Timeout)
	case "s3":
		return openS3(u, opts)
	}
	return nil, fmt.Errorf("store.url %q: want file:///DIR or s3://BUCKET/PREFIX", redact(u))
}

func redact(u *url.URL) string {
	c := *u
	c.User = nil
	return c.String()
}

func openS3(u *url.URL, opts Options) (Store, error) {
	bucket := u.Host
	if bucket == "" || len(bucket) < 3 || len(bucket) > 63 || strings.Trim(bucket, "abcdefghijklmnopqrstuvwxyz0123456789.-") != "" {
		return nil, fmt.Errorf("store.url %q: bucket %q: want 3 to 63 of a-z 0-9 . -", opts.URL, bucket)
	}
	prefix := strings.Trim(u.Path, "/")
	if prefix != "" {
		if err := CheckKey(prefix); err != nil {
			return nil, fmt.Errorf("store.url %q: prefix: %w", opts.URL, err)
		}
		prefix += "/"
	}
	ep, err := url.Parse(opts.S3.Endpoint)
	if err != nil || (ep.Scheme != "http" && ep.Scheme != "https") || ep.Host == "" || (ep.Path != "" && ep.Path != "/") || ep.User != nil {
		return nil, fmt.Errorf("store.s3.endpoint %q: want http(s)://HOST[:PORT] (no path, no credentials)", opts.S3.Endpoint)
	}
	creds, err := s3Credentials(opts.S3)
	if err != nil {
		return nil, err
	}
	c, err := minio.New(ep.Host, &minio.Options{
		Creds: creds, Secure: ep.Scheme == "https", Region: opts.S3.Region,
		BucketLookup: minio.BucketLookupPath, Transport: s3Transport(opts.Timeout), MaxRetries: 2,
	})
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", opts.URL, err)
	}
	return &s3Store{c: c, bucket: bucket, prefix: prefix, endpoint: ep.Scheme + "://" + ep.Host, timeout: opts.Timeout}, nil
}

// s3Credentials are the environment's, else the shared credentials file's;
// neither is a refusal that says where it looked.
func s3Credentials(o S3Options) (*credentials.Credentials, error) {
	if os.Getenv("AWS_ACCESS_KEY_ID") != "" && os.Getenv("AWS_SECRET_ACCESS_KEY") != "" {
		return credentials.NewEnvAWS(), nil
	}
	file := o.CredentialsFile
	if file == "" {
		file = os.Getenv("AWS_SHARED_CREDENTIALS_FILE")
	}
	if file == "" {
		if home, err := os.UserHomeDir(); err == nil {
			file = filepath.Join(home, ".aws", "credentials")
		}
	}
	creds := credentials.NewFileAWSCredentials(file, o.Profile)
	v, err := creds.GetWithContext(nil)
	if err != nil || v.AccessKeyID == "" || v.SecretAccessKey == "" {
		return nil, fmt.Errorf("store: no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or write them to an AWS credentials file (%s, profile %q; store.s3.credentials_file): %v", file, o.Profile, err)
	}
	return creds, nil
}

// LocalDir is the directory of a file store (under any Quota), for callers
// that copy into it directly (session's sparse persisted workspaces).
func LocalDir(s Store) (string, bool) {
	for {
		switch x := s.(type) {
		case *fileStore:
			return x.dir, true
		case interface{ Unwrap() Store }:
			s = x.Unwrap()
		default:
			return "", false
		}
	}
}
