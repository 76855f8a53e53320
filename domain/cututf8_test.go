package domain_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"

	"github.com/sagaengine/saga/domain"
)

func TestCutUTF8NeverSplitsACharacter(t *testing.T) {
	s := "aé€😀"
	for n := range len(s) + 2 {
		cut := domain.CutUTF8(s, n)
		assert.True(t, utf8.ValidString(cut), "%d: %q", n, cut)
		assert.True(t, strings.HasPrefix(s, cut))
		assert.LessOrEqual(t, len(cut), n)
		assert.Greater(t, len(cut), n-utf8.UTFMax, "%d: cut no more than a character short", n)
	}
	assert.Equal(t, []byte("\xff\xfe"), domain.CutUTF8([]byte("\xff\xfe\xfd\xfc\xfb"), 2), "bytes that are not UTF-8 are cut where asked")
}

// TestRefusedOrderIDIsQuotedWhole: the reason quoting a refused id cuts it
// on a character boundary, so the dead-letter table shows text, not \xc3.
func TestRefusedOrderIDIsQuotedWhole(t *testing.T) {
	doc, err := domain.ParseOrderDocument([]byte(`{"orderId":"a`+strings.Repeat("é", 100)+`"}`), 0)
	assert.NoError(t, err)
	_, err = doc.Order(&domain.Workflow{Name: "order"}, "")
	assert.ErrorIs(t, err, domain.ErrInvalidMessage)
	assert.True(t, utf8.ValidString(err.Error()))
	assert.NotContains(t, err.Error(), `\x`)
}
