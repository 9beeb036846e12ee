package dashboard

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// stubDOM is just enough of a browser for the page's render: elements
// that keep their attributes, children and text.
const stubDOM = `
function El(tag){this.tag=tag;this.attrs={};this.children=[];this.textContent="";this.dataset={};this.style={};this.className="";}
El.prototype.setAttribute=function(k,v){this.attrs[k]=String(v);};
El.prototype.getAttribute=function(k){return this.attrs[k];};
El.prototype.appendChild=function(c){this.children.push(c);return c;};
El.prototype.removeChild=function(c){this.children=this.children.filter(x=>x!==c);};
Object.defineProperty(El.prototype,"firstChild",{get(){return this.children[0]||null;}});
const byId={};
for(const id of ["title","summary","unit","losschart","tputchart","notes"])byId[id]=new El(id);
byId.losschart.attrs={width:"460",height:"200"};byId.tputchart.attrs={width:"460",height:"200"};
const tbody=new El("tbody");
globalThis.document={getElementById:id=>byId[id],querySelector:()=>tbody,createElement:t=>new El(t),createElementNS:(ns,t)=>new El(t)};
globalThis.fetch=async()=>({ok:false});globalThis.setTimeout=()=>{};
`

// TestPageRendersNonFinite runs the page's script in Node (skipped
// without it) on the state of a diverged run: it must render, show NaN
// and +Inf as such, and draw the finite points only.
func TestPageRendersNonFinite(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node binary (Debian: apt-get install nodejs); page script test skipped")
	}
	h := NewHub("diverging", 2, "")
	h.SetUnit("tokens")
	h.Record(Report{Rank: 0, Step: 0, Loss: 2.3, Samples: 64, Seconds: 0.01})
	h.Record(Report{Rank: 0, Step: 1, Loss: 2.1, Samples: 64, Seconds: 0.01})
	h.Record(Report{Rank: 0, Step: 2, Loss: Float(math.Inf(1)), Samples: 64, Seconds: 0.01})
	h.Record(Report{Rank: 1, Step: 2, Loss: Float(math.NaN()), Samples: 64, Seconds: 0.01, Comm: Float(math.NaN())})
	state, err := json.Marshal(h.State())
	if err != nil {
		t.Fatal(err)
	}
	html := string(page)
	i, j := strings.Index(html, "<script>"), strings.Index(html, "</script>")
	if i < 0 || j < i {
		t.Fatal("page has no script")
	}
	script := stubDOM + html[i+len("<script>"):j] + `
render(` + string(state) + `);
const rows=tbody.children.map(r=>r.children.slice(0,3).map(c=>c.textContent).join(" "));
const line=byId.losschart.children.find(c=>c.attrs.id==="losscurve");
console.log(JSON.stringify({summary:byId.summary.textContent,unit:byId.unit.textContent,rows,points:line?line.attrs.points:""}));
`
	path := filepath.Join(t.TempDir(), "page.js")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(node, path).CombinedOutput()
	if err != nil {
		t.Fatalf("the page's script failed on a diverged run's state: %v\n%s", err, out)
	}
	var got struct {
		Summary, Unit, Points string
		Rows                  []string
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(got.Summary, "loss +Inf") || got.Unit != "tokens/s" {
		t.Errorf("summary %q, unit %q: want loss +Inf in tokens/s", got.Summary, got.Unit)
	}
	if strings.Join(got.Rows, "|") != "0 2 +Inf|1 2 NaN" {
		t.Errorf("rank rows %q, want rank 0 at +Inf and rank 1 at NaN", got.Rows)
	}
	if n := len(strings.Fields(got.Points)); n != 2 || strings.Contains(got.Points, "NaN") {
		t.Errorf("loss curve points %q: want the 2 finite ones", got.Points)
	}
}
