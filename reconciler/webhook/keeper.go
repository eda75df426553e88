package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Keys of the certificate Secret.
const (
	keyCACert         = "ca.crt"
	keyCAKey          = "ca.key"
	keyPreviousCACert = "ca-previous.crt"
	// annotationCARotatedAt records Certs.CARotatedAt (RFC 3339).
	annotationCARotatedAt = "rollgate.dev/ca-rotated-at"
)

// Keeper keeps the webhook's certificates: it reads them from the Secret
// (shared by every replica), renews them there when due, serves the
// current serving certificate and puts the CA bundle into the webhook
// configurations, at once whenever they change (configWatch) and every
// check interval. It runs on every replica, not only the leader.
type Keeper struct {
	reader   client.Reader
	writer   client.Client
	secret   client.ObjectKey
	hosts    []string
	rotation Rotation
	interval time.Duration
	now      func() time.Time
	// publish receives the CA bundle after every sync (the webhook
	// configurations are written there) and says what it wrote.
	publish func(ctx context.Context, bundle []byte) (published, error)
	// changes wakes Start when a webhook configuration changed (one
	// pending wake at most: a burst of changes is one sync).
	changes chan struct{}

	mu      sync.RWMutex
	serving *tls.Certificate
}

// NeedLeaderElection is false: every replica serves the webhook.
func (k *Keeper) NeedLeaderElection() bool { return false }

// resyncAfterChange is how soon a replica checks again after it renewed
// the certificates, so that a CA bundle another replica published from an
// older read is put right well within Rotation.Grace (the watch on the
// configurations does it sooner; this holds without it).
const resyncAfterChange = 30 * time.Second

// Pacing of repairs. A configuration without the CA bundle refuses every
// update sent to its webhooks, so it is always repaired at once. Hooks that
// differ while the bundle is right are what two controller versions side
// by side during an upgrade disagree on, each putting back its own: those
// are repaired at once the first freeRepairs times in a row; after that a
// sync woken by a change waits one second, then two, four..., up to
// maxSettle, until no such repair was needed for quietAfter. The two
// versions then rewrite the configurations a few times and then about
// once a minute until the old one is gone, rather than in a tight loop.
const (
	freeRepairs = 3
	maxSettle   = time.Minute
	quietAfter  = 2 * maxSettle
)

// pace counts the repairs of a streak.
type pace struct {
	streak int
	last   time.Time
}

// repaired records a repair at now.
func (p *pace) repaired(now time.Time) {
	if now.Sub(p.last) > quietAfter {
		p.streak = 0
	}
	p.streak++
	p.last = now
}

// settle returns how long a sync woken by a change at now waits.
func (p *pace) settle(now time.Time) time.Duration {
	if p.streak < freeRepairs || now.Sub(p.last) > quietAfter {
		return 0
	}
	d := time.Second
	for i := freeRepairs; i < p.streak && d < maxSettle; i++ {
		d *= 2
	}
	return min(d, maxSettle)
}

// configurationChanged wakes Start to sync now.
func (k *Keeper) configurationChanged() {
	select {
	case k.changes <- struct{}{}:
	default:
	}
}

// Start syncs at once, then every check interval and whenever a webhook
// configuration changed (retrying failures after a few seconds), until
// ctx ends.
func (k *Keeper) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("webhook-certs")
	backoff := time.Second
	var repairs pace
	woken := false
	for {
		wait := k.interval
		renewed, out, err := k.sync(ctx)
		switch {
		case err != nil && apierrors.IsConflict(err):
			// Another replica wrote the same object first (every replica
			// repairs a changed configuration): read it again.
			logger.V(1).Info("webhook certificates or configurations written by someone else meanwhile", "error", err.Error())
			wait, backoff = backoff, min(2*backoff, 30*time.Second)
		case err != nil:
			logger.Error(err, "sync webhook certificates", "secret", k.secret)
			wait, backoff = backoff, min(2*backoff, 30*time.Second)
		case renewed:
			wait, backoff = min(wait, resyncAfterChange), time.Second
		default:
			backoff = time.Second
		}
		if woken && out.wrote && !renewed {
			if out.bundle {
				logger.Info("webhook configurations changed by someone else; CA bundle and hooks put back")
			} else {
				repairs.repaired(time.Now())
				logger.Info("webhook configurations changed by someone else; hooks put back", "repairsInARow", repairs.streak)
			}
		}
		woken = false
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		case <-k.changes:
			woken = true
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(repairs.settle(time.Now())):
			}
		}
	}
}

// Sync reads the Secret, renews the certificates when due (creating the
// Secret the first time), loads the serving certificate and publishes the
// CA bundle. A conflict with another replica's write is returned as an
// error; the next sync reads the winner's certificates.
func (k *Keeper) Sync(ctx context.Context) error {
	_, _, err := k.sync(ctx)
	return err
}

// sync is Sync, reporting whether it renewed the certificates and what it
// wrote to the webhook configurations.
func (k *Keeper) sync(ctx context.Context) (renewed bool, out published, err error) {
	now := k.now()
	secret := &corev1.Secret{}
	err = k.reader.Get(ctx, k.secret, secret)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return false, out, fmt.Errorf("get Secret %s: %w", k.secret, err)
	}
	var cur *Certs
	if exists {
		cur = certsFrom(secret)
	}
	next, renewed, err := k.rotation.Next(cur, k.hosts, now)
	if err != nil {
		return false, out, err
	}
	if renewed {
		if err := k.write(ctx, secret, exists, next); err != nil {
			return false, out, err
		}
		log.FromContext(ctx).Info("webhook certificates renewed", "secret", k.secret, "caRotatedAt", next.CARotatedAt)
	}
	if out, err = k.publish(ctx, next.Bundle(now)); err != nil {
		return renewed, out, err
	}
	pair, err := keyPair(next.Cert, next.Key)
	if err != nil {
		return renewed, out, err
	}
	k.mu.Lock()
	k.serving = pair
	k.mu.Unlock()
	return renewed, out, nil
}

func (k *Keeper) write(ctx context.Context, secret *corev1.Secret, exists bool, c *Certs) error {
	secret.Name, secret.Namespace = k.secret.Name, k.secret.Namespace
	secret.Type = corev1.SecretTypeTLS
	if secret.Annotations == nil {
		secret.Annotations = map[string]string{}
	}
	secret.Annotations[annotationCARotatedAt] = c.CARotatedAt.UTC().Format(time.RFC3339)
	secret.Data = map[string][]byte{
		corev1.TLSCertKey:       c.Cert,
		corev1.TLSPrivateKeyKey: c.Key,
		keyCACert:               c.CACert,
		keyCAKey:                c.CAKey,
	}
	if len(c.PreviousCACert) > 0 {
		secret.Data[keyPreviousCACert] = c.PreviousCACert
	}
	var err error
	if exists {
		err = k.writer.Update(ctx, secret)
	} else {
		err = k.writer.Create(ctx, secret)
	}
	if err != nil {
		return fmt.Errorf("write Secret %s: %w", k.secret, err)
	}
	return nil
}

func certsFrom(s *corev1.Secret) *Certs {
	c := &Certs{
		CACert:         s.Data[keyCACert],
		CAKey:          s.Data[keyCAKey],
		Cert:           s.Data[corev1.TLSCertKey],
		Key:            s.Data[corev1.TLSPrivateKeyKey],
		PreviousCACert: s.Data[keyPreviousCACert],
	}
	if t, err := time.Parse(time.RFC3339, s.Annotations[annotationCARotatedAt]); err == nil {
		c.CARotatedAt = t
	}
	return c
}

// GetCertificate serves the current certificate (tls.Config hook).
func (k *Keeper) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	if k.serving == nil {
		return nil, errors.New("webhook certificate not loaded yet")
	}
	return k.serving, nil
}

// Ready is a readiness check: nil once a certificate is served.
func (k *Keeper) Ready(*http.Request) error {
	_, err := k.GetCertificate(nil)
	return err
}

func keyPair(cert, key []byte) (*tls.Certificate, error) {
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	return &pair, nil
}
