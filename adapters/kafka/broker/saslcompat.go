package broker

import (
	"context"
	"encoding/binary"
	"io"
	"slices"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// advertiseSASLHandshakeV0 makes the embedded broker advertise
// SaslHandshake from version 0, as Kafka does, while it serves only v1.
// librdkafka (kcat, confluent-kafka clients) enables SASL only when the
// advertised range includes v0, though it then sends v1 to any broker that
// supports SaslAuthenticate; kfake advertises 1-1, so without this no
// librdkafka client could log in. The ApiVersions answer is kfake's own,
// fetched once over an in-process connection, with that one range widened.
func (b *Broker) advertiseSASLHandshakeV0(cluster *kfake.Cluster) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	own, err := b.fetchAPIVersions(ctx)
	if err != nil {
		return errors.Wrap(err, "read the embedded broker's API versions")
	}
	own.ApiKeys = slices.Clone(own.ApiKeys)
	for i := range own.ApiKeys {
		if own.ApiKeys[i].ApiKey == int16(kmsg.SASLHandshake) {
			own.ApiKeys[i].MinVersion = 0
		}
	}
	cluster.ControlKey(int16(kmsg.ApiVersions), func(r kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		req := r.(*kmsg.ApiVersionsRequest)
		// Newer versions, and v3+ requests kfake must validate, stay
		// kfake's to answer.
		if req.Version > own.Version || req.Version >= 3 && (req.ClientSoftwareName == "" || req.ClientSoftwareVersion == "") {
			return nil, nil, false
		}
		resp := *own
		resp.Version = req.Version
		return &resp, nil, true
	})
	return nil
}

// fetchAPIVersions asks the broker for its ApiVersions (v3) over an
// in-process connection, which needs no TLS and, for this request, no SASL.
func (b *Broker) fetchAPIVersions(ctx context.Context) (*kmsg.ApiVersionsResponse, error) {
	conn, err := b.listener.dialInternal(ctx, "", "")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 3
	req.ClientSoftwareName, req.ClientSoftwareVersion = "saga", "1"
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("saga")).AppendRequest(nil, req, 1)
	if _, err := conn.Write(frame); err != nil {
		return nil, err
	}
	var size [4]byte
	if _, err := io.ReadFull(conn, size[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(conn, body); err != nil {
		return nil, err
	}
	resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	// The ApiVersions response header is never flexible: just the
	// correlation id.
	if len(body) < 4 {
		return nil, errors.New("short ApiVersions response")
	}
	if err := resp.ReadFrom(body[4:]); err != nil {
		return nil, err
	}
	if resp.ErrorCode != 0 {
		return nil, errors.Newf("ApiVersions error code %d", resp.ErrorCode)
	}
	return resp, nil
}
