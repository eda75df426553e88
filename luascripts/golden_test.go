package luascripts

import (
	"bytes"
	"testing"
)

func TestGoldenCases(t *testing.T) {
	for _, dir := range []string{"testdata/trafficrouting", "testdata/trafficrouting_ingress", "kruise/good", "kruise/misroute"} {
		var out bytes.Buffer
		failed, err := RunCases(dir, NewLibrary(), &out)
		if err != nil {
			t.Fatal(err)
		}
		if failed > 0 {
			t.Errorf("%s: %d steps failed:\n%s", dir, failed, out.String())
		} else {
			t.Log(out.String())
		}
	}
}
