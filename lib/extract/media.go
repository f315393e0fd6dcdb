package extract

import (
	"bytes"
)

// A prompt that needs an image, audio or video cannot be sent as text
// without losing what it asks about, so every layout follows one rule: a
// record that carries media is rejected as multimodal. Media are
//   - non-empty media fields: images, audios, videos (LLaMA-Factory),
//     image, audio, video (LLaVA and others);
//   - media content parts: image_url, input_image, image, audio_url,
//     input_audio, audio, video_url, video (OpenAI, Responses API,
//     LLaMA-Factory v1, Hugging Face chat templates);
//   - a user turn that starts or ends with an <image>, <audio> or <video>
//     placeholder, where LLaVA and LLaMA-Factory put them (text that only
//     mentions <video> within a sentence is text).

// mediaPart names the content part types that carry media.
var mediaPart = map[string]bool{
	`"image_url"`: true, `"input_image"`: true, `"image"`: true,
	`"audio_url"`: true, `"input_audio"`: true, `"audio"`: true,
	`"video_url"`: true, `"video"`: true, `"input_video"`: true,
}

// mediaFields rejects a record with a non-empty media field.
func (x *Extractor) mediaFields() *badRecord {
	for _, m := range []struct {
		name string
		raw  []byte
	}{{"images", x.f.Images}, {"audios", x.f.Audios}, {"videos", x.f.Videos},
		{"image", x.f.Image}, {"audio", x.f.Audio}, {"video", x.f.Video}} {
		if nonEmpty(m.raw) {
			return reject(ReasonMultimodal, "the record has %s; only text prompts can be extracted", m.name)
		}
	}
	return nil
}

// placeholders rejects a record whose user turns start or end with a
// media placeholder.
func (x *Extractor) placeholders() *badRecord {
	for i, m := range x.msgs {
		if m.role != roleUser {
			continue
		}
		if p := placeholder(m.content); p != "" {
			return reject(ReasonMultimodal, "user turn %d has the placeholder %s; only text prompts can be extracted", x.userNumber(i), p)
		}
	}
	return nil
}

func (x *Extractor) userNumber(msg int) int {
	n := 0
	for _, m := range x.msgs[:msg+1] {
		if m.role == roleUser {
			n++
		}
	}
	return n
}

// The placeholders, also as encoders that escape HTML write them.
var placeholderSpellings = [][2]string{
	{"<image>", "<image>"}, {`\u003cimage\u003e`, "<image>"},
	{"<audio>", "<audio>"}, {`\u003caudio\u003e`, "<audio>"},
	{"<video>", "<video>"}, {`\u003cvideo\u003e`, "<video>"},
}

// placeholder returns the placeholder a string token starts or ends with
// (white space aside), or "". It looks only at the ends of the text.
func placeholder(tok []byte) string {
	body := trimTokenSpace(tok[1 : len(tok)-1])
	for _, p := range placeholderSpellings {
		if bytes.HasPrefix(body, []byte(p[0])) || bytes.HasSuffix(body, []byte(p[0])) {
			return p[1]
		}
	}
	return ""
}

// trimTokenSpace trims spaces, tabs and line breaks, raw or escaped, from
// both ends of a token's body.
func trimTokenSpace(b []byte) []byte {
	for n := spaceAt(b, 0); n > 0; n = spaceAt(b, 0) {
		b = b[n:]
	}
	for n := spaceBefore(b); n > 0; n = spaceBefore(b) {
		b = b[:len(b)-n]
	}
	return b
}

// spaceAt is the length of the white space (a byte, or an escape) at
// b[i:], or 0.
func spaceAt(b []byte, i int) int {
	switch {
	case i >= len(b):
		return 0
	case b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r':
		return 1
	case b[i] == '\\' && i+1 < len(b) && (b[i+1] == 'n' || b[i+1] == 't' || b[i+1] == 'r'):
		return 2
	}
	return 0
}

// spaceBefore is the length of the white space that ends b, or 0. An
// escape is recognised when its backslash is not itself escaped.
func spaceBefore(b []byte) int {
	n := len(b)
	switch {
	case n == 0:
		return 0
	case b[n-1] == ' ' || b[n-1] == '\t' || b[n-1] == '\n' || b[n-1] == '\r':
		return 1
	case n >= 2 && b[n-2] == '\\' && (n < 3 || b[n-3] != '\\') && spaceAt(b, n-2) == 2:
		return 2
	}
	return 0
}
