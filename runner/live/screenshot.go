package live

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// screenFileName is where the hypervisor writes a screenshot's PPM, in the state directory,
// for the moment the runner reads it.
const screenFileName = "screen.ppm"

// Screenshot is GET /v1/screenshot: the guest's display as a PNG, captured by the hypervisor
// (hypervisor.Screen) as PPM and converted here. One at a time.
type Screenshot struct {
	file string
	hv   hypervisor.Screen // nil: the hypervisor has no display

	mu sync.Mutex
}

// NewScreenshot captures hv's display through a file in cfg's state directory.
func NewScreenshot(cfg runnerconfig.Config, hv hypervisor.Hypervisor) *Screenshot {
	s := &Screenshot{file: filepath.Join(cfg.StateDir, screenFileName)}
	s.hv, _ = hv.(hypervisor.Screen)
	return s
}

// Routes registers GET /v1/screenshot.
func (s *Screenshot) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+controlapi.ScreenshotPath, s.serve)
}

// errorBody is an error answer of a resource whose success is not JSON.
type errorBody struct {
	Error string `json:"error"`
}

func (s *Screenshot) serve(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	b, err := s.capture(ctx)
	switch {
	case errors.Is(err, hypervisor.ErrNoDisplay):
		writeJSON(w, http.StatusConflict, errorBody{Error: err.Error()})
	case err != nil:
		writeJSON(w, statusOf(err), errorBody{Error: "screenshot: " + err.Error()})
	default:
		w.Header().Set("Content-Type", "image/png")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		_, _ = w.Write(b)
	}
}

// capture has the hypervisor write the screen, reads it back as PNG and removes the file.
func (s *Screenshot) capture(ctx context.Context) ([]byte, error) {
	if s.hv == nil {
		return nil, hypervisor.ErrNoDisplay
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer os.Remove(s.file)
	if err := s.hv.Screendump(ctx, s.file); err != nil {
		return nil, err
	}
	ppm, err := os.ReadFile(s.file)
	if err != nil {
		return nil, err
	}
	img, err := DecodePPM(ppm)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	// Fast rather than small: a screen's runs of one colour compress well either way.
	if err := (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&out, img); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// maxScreenPixels bounds a screen: 16 MiB of video memory holds fewer at 32 bits a pixel.
const maxScreenPixels = 1 << 24

// DecodePPM reads a binary PPM (P6) with 8-bit channels, as QEMU's screendump writes it: the
// magic, width, height and maximum value, separated by whitespace (and # comments), one
// whitespace byte, then the rows of RGB triples.
func DecodePPM(b []byte) (*image.RGBA, error) {
	var head [4]string
	rest := b
	for i := range head {
		tok, r, err := ppmToken(rest)
		if err != nil {
			return nil, fmt.Errorf("PPM header: %w", err)
		}
		head[i], rest = tok, r
	}
	w, errW := strconv.Atoi(head[1])
	h, errH := strconv.Atoi(head[2])
	switch {
	case head[0] != "P6":
		return nil, fmt.Errorf("PPM: magic %q, want P6 (binary RGB)", head[0])
	case errW != nil || errH != nil || w <= 0 || h <= 0 || w*h > maxScreenPixels:
		return nil, fmt.Errorf("PPM: size %sx%s is not a screen's", head[1], head[2])
	case head[3] != "255":
		return nil, fmt.Errorf("PPM: maximum value %s, want 255 (8-bit channels)", head[3])
	case len(rest) < 1 || !ppmSpace(rest[0]) || len(rest)-1 != w*h*3:
		return nil, fmt.Errorf("PPM: %d bytes of pixels for %dx%d, want %d", max(len(rest)-1, 0), w, h, w*h*3)
	}
	px := rest[1:] // the one whitespace byte after the maximum value
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i, j := 0, 0; i < len(px); i, j = i+3, j+4 {
		img.Pix[j], img.Pix[j+1], img.Pix[j+2], img.Pix[j+3] = px[i], px[i+1], px[i+2], 0xff
	}
	return img, nil
}

// ppmToken skips whitespace and comments and returns the next token and what follows it.
func ppmToken(b []byte) (string, []byte, error) {
	for len(b) > 0 {
		switch c := b[0]; {
		case c == '#':
			if i := bytes.IndexByte(b, '\n'); i >= 0 {
				b = b[i+1:]
			} else {
				b = nil
			}
		case ppmSpace(c):
			b = b[1:]
		default:
			i := 0
			for i < len(b) && i < 16 && !ppmSpace(b[i]) && b[i] != '#' {
				i++
			}
			if i == 16 {
				return "", nil, errors.New("a token longer than 16 bytes")
			}
			return string(b[:i]), b[i:], nil
		}
	}
	return "", nil, errors.New("ends early")
}

func ppmSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}
