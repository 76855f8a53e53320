package engine

import (
	"net"

	"github.com/sagaengine/saga/adapters/kafka/broker"
	"github.com/sagaengine/saga/adapters/secure"
)

// secureFiles prepares the secure mode's files once (Config.Secure).
func (a *App) secureFiles() (*secure.Files, error) {
	if a.Secure != nil {
		return a.Secure, nil
	}
	dir := a.cfg.SecureDir
	var hosts []string
	for _, addr := range []string{a.cfg.KafkaListen, a.cfg.EventStoreListen} {
		if host, _, err := net.SplitHostPort(addr); err == nil && host != "" {
			hosts = append(hosts, host)
		}
	}
	files, err := secure.Prepare(dir, hosts...)
	if err != nil {
		return nil, err
	}
	a.Secure = files
	return files, nil
}

// secureBroker makes the embedded broker require TLS and SASL/SCRAM, and
// the engine's clients use the generated credentials.
func (a *App) secureBroker(cfg *broker.Config) error {
	files, err := a.secureFiles()
	if err != nil {
		return err
	}
	if cfg.TLS, err = files.ServerTLS(); err != nil {
		return err
	}
	if cfg.Users, err = files.KafkaUsers(); err != nil {
		return err
	}
	a.KafkaSecurity = files.KafkaSecurity()
	return nil
}
