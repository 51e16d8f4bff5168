package live

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/color"
	"image/png"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// ppm is a w×h P6 image as QEMU's screendump writes it: header "P6\n<w> <h>\n255\n", then the
// rows; pixel i is (i, 2i, 3i) modulo 256.
func ppm(w, h int) []byte {
	b := []byte(fmt.Sprintf("P6\n%d %d\n255\n", w, h))
	for i := range w * h {
		b = append(b, byte(i), byte(2*i), byte(3*i))
	}
	return b
}

// TestDecodePPM reads QEMU's PPM pixel for pixel, and other headers' whitespace and comments;
// anything that is not an 8-bit P6 of the size it says is refused.
func TestDecodePPM(t *testing.T) {
	img, err := DecodePPM(ppm(3, 2))
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 3 || b.Dy() != 2 {
		t.Fatalf("bounds %v", b)
	}
	if c := img.RGBAAt(1, 1); c != (color.RGBA{4, 8, 12, 0xff}) {
		t.Errorf("pixel (1,1) = %v, want pixel 4: {4 8 12 255}", c)
	}
	commented := append([]byte("P6 # QEMU\n# a comment\n  3\t2\r\n255 "), ppm(3, 2)[len("P6\n3 2\n255\n"):]...)
	if _, err := DecodePPM(commented); err != nil {
		t.Errorf("comments and other whitespace: %v", err)
	}
	for name, b := range map[string][]byte{
		"ASCII PPM":        []byte("P3\n1 1\n255\n0 0 0\n"),
		"16-bit channels":  append([]byte("P6\n1 1\n65535\n"), make([]byte, 6)...),
		"short pixels":     ppm(3, 2)[:20],
		"extra pixels":     append(ppm(3, 2), 0),
		"no size":          []byte("P6\n"),
		"zero width":       []byte("P6\n0 2\n255\n"),
		"huge":             []byte("P6\n100000 100000\n255\n"),
		"no space after":   []byte("P6\n1 1\n255"),
		"endless token":    []byte("P6\n11111111111111111111111 1\n255\n"),
		"comment to end":   []byte("P6 # nothing else"),
		"negative height":  []byte("P6\n1 -1\n255\n"),
		"not PPM at all":   []byte("\x89PNG\r\n\x1a\n"),
		"maxval not 8-bit": append([]byte("P6\n1 1\n15\n"), 0, 0, 0),
	} {
		if _, err := DecodePPM(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// TestScreenshot: GET /v1/screenshot answers the screen as a PNG of the same pixels and leaves
// no file behind; 409 with the reason for a guest without a display or not running.
func TestScreenshot(t *testing.T) {
	dir := t.TempDir()
	g := &meteredGuest{running: true, screen: ppm(720, 400)}
	h := Handler(NewScreenshot(runnerconfig.Config{StateDir: dir}, g).Routes)
	code, body, ctype := getScreenshot(h)
	if code != http.StatusOK || ctype != "image/png" {
		t.Fatalf("GET: %d %s %q", code, ctype, body[:min(len(body), 200)])
	}
	img, err := png.Decode(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("the answer is no PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 720 || b.Dy() != 400 {
		t.Errorf("PNG of %v, want 720x400", b)
	}
	if r, gr, b, _ := img.At(5, 0).RGBA(); r>>8 != 5 || gr>>8 != 10 || b>>8 != 15 {
		t.Errorf("pixel (5,0) = %d %d %d, want 5 10 15", r>>8, gr>>8, b>>8)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Errorf("files left in the state directory: %v", left)
	}
	for name, guest := range map[string]*meteredGuest{
		"no display":  {running: true},
		"not running": {screen: ppm(1, 1)},
	} {
		code, body, _ := getScreenshot(Handler(NewScreenshot(runnerconfig.Config{StateDir: dir}, guest).Routes))
		var e errorBody
		if err := json.Unmarshal(body, &e); code != http.StatusConflict || err != nil || e.Error == "" {
			t.Errorf("%s: %d %q, want 409 with the reason", name, code, body)
		}
		if name == "no display" && !strings.Contains(e.Error, "--display=none") {
			t.Errorf("no display: %q does not say why", e.Error)
		}
	}
	// A hypervisor without a display at all (cloud-hypervisor's driver).
	if code, _, _ := getScreenshot(Handler(NewScreenshot(runnerconfig.Config{StateDir: dir}, plainHypervisor{}).Routes)); code != http.StatusConflict {
		t.Errorf("a hypervisor without displays: %d, want 409", code)
	}
}

// plainHypervisor has nothing beyond the Hypervisor interface.
type plainHypervisor struct{ hypervisor.Hypervisor }

func getScreenshot(h http.Handler) (int, []byte, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, controlapi.ScreenshotPath, nil))
	return rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type")
}
