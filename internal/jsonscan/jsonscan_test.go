package jsonscan

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMembersAndElements(t *testing.T) {
	obj := []byte(` {"a" : 1, "b":"x}y\"", "c":[1, {"d": [ ]}], "e":null ,"f":{"g":true}, "a":-2.5e3} `)
	var keys, vals []string
	it := Members(Trim(obj))
	for {
		k, v, k0, ok := it.NextMember()
		if !ok {
			break
		}
		if got := string(Trim(obj)[k0 : k0+len(k)+2]); got != `"`+string(k)+`"` {
			t.Errorf("k0 of %s points at %q", k, got)
		}
		keys, vals = append(keys, string(k)), append(vals, string(v))
	}
	if d := cmp.Diff([]string{"a", "b", "c", "e", "f", "a"}, keys); d != "" {
		t.Errorf("keys (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"1", `"x}y\""`, `[1, {"d": [ ]}]`, "null", `{"g":true}`, "-2.5e3"}, vals); d != "" {
		t.Errorf("values (-want +got):\n%s", d)
	}
	if v, ok := Get(Trim(obj), "a"); !ok || string(v) != "-2.5e3" {
		t.Errorf("Get a = %s %v, want the last value", v, ok)
	}
	if _, ok := Get(Trim(obj), "z"); ok {
		t.Error("Get of a missing key found it")
	}
	var elems []string
	el := Elements([]byte(`[ 1,"a,b" , [2,3],{},null ]`))
	for {
		v, ok := el.NextElement()
		if !ok {
			break
		}
		elems = append(elems, string(v))
	}
	if d := cmp.Diff([]string{"1", `"a,b"`, "[2,3]", "{}", "null"}, elems); d != "" {
		t.Errorf("elements (-want +got):\n%s", d)
	}
	if _, ok := (&Iter{b: []byte("[]"), i: 1, end: ']'}).NextElement(); ok {
		t.Error("an empty array has an element")
	}
}

func TestKinds(t *testing.T) {
	for in, want := range map[string]Kind{"null": Null, "true": Bool, "false": Bool, "-1": Number, "0.5": Number,
		`"s"`: String, "[]": Array, "{}": Object, "": Invalid, "x": Invalid} {
		if got := KindOf([]byte(in)); got != want {
			t.Errorf("KindOf(%q) = %d, want %d", in, got, want)
		}
	}
}

// FuzzScan holds the scanner to encoding/json on any valid JSON: an
// object's members (last value of a repeated key), an array's elements and
// every string's decoded text.
func FuzzScan(f *testing.F) {
	for _, s := range []string{
		`{"a":1,"b":[1,2,{"c":"d"}],"a":"\u00e9\ud83d\ude00\ud800x\n"}`,
		`["x\\y", "\u0000", "\ud800\u0041", "\udc00", "é", "\ufffd"]`,
		`{"mod\u0065l":"auto","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`,
		`"plain"`, `[]`, `{}`, `[[[]]]`,
	} {
		f.Add([]byte(s))
	}
	f.Add([]byte("\"\xff\xfe bad utf-8\""))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		check(t, Trim(raw))
	})
}

// check compares the scan of the valid value v with encoding/json.
func check(t *testing.T, v []byte) {
	switch KindOf(v) {
	case String:
		var want string
		if err := json.Unmarshal(v, &want); err != nil {
			t.Fatal(err)
		}
		got, ok := AppendUnquoted(nil, v[1:len(v)-1])
		if !ok || string(got) != want {
			t.Errorf("AppendUnquoted(%q) = %q %v, want %q", v, got, ok, want)
		}
		if Simple(v[1:len(v)-1]) && string(v[1:len(v)-1]) != want {
			t.Errorf("Simple(%q) but it decodes to %q", v, want)
		}
	case Object:
		var want map[string]json.RawMessage
		if err := json.Unmarshal(v, &want); err != nil {
			t.Fatal(err)
		}
		got := map[string]json.RawMessage{}
		it := Members(v)
		for {
			k, x, _, ok := it.NextMember()
			if !ok {
				break
			}
			key, ok := AppendUnquoted(nil, k)
			if !ok {
				t.Fatalf("key %q does not unquote", k)
			}
			got[string(key)] = x
			if !KeyIs(k, string(key)) {
				t.Errorf("KeyIs(%q, %q) is false", k, key)
			}
			check(t, x)
		}
		if d := cmp.Diff(want, got, cmp.Comparer(func(a, b json.RawMessage) bool { return bytes.Equal(a, b) })); d != "" {
			t.Errorf("members of %s (-want +got):\n%s", v, d)
		}
	case Array:
		var want []json.RawMessage
		if err := json.Unmarshal(v, &want); err != nil {
			t.Fatal(err)
		}
		var got []json.RawMessage
		it := Elements(v)
		for {
			x, ok := it.NextElement()
			if !ok {
				break
			}
			got = append(got, x)
			check(t, x)
		}
		if len(got) != len(want) {
			t.Fatalf("elements of %s: got %d, want %d", v, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Errorf("element %d of %s: got %s, want %s", i, v, got[i], want[i])
			}
		}
	}
}
