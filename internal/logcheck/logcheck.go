package logcheck

import (
	"go/ast"
	"go/constant"
	"go/types"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/inspect"
	"golang.org/x/tools/go/ast/inspector"
	"golang.org/x/tools/go/types/typeutil"
)

// Analyzer reports hclog calls whose message is not a constant string or whose key/value
// arguments do not pair up.
var Analyzer = &analysis.Analyzer{
	Name:     "logcheck",
	Doc:      "report hclog calls with a non-constant message or an odd number of key/value arguments",
	Requires: []*analysis.Analyzer{inspect.Analyzer},
	Run:      run,
}

const hclogPath = "github.com/hashicorp/go-hclog"

// msgArg is where the message sits in each logging method of hclog.Logger.
var msgArg = map[string]int{"Trace": 0, "Debug": 0, "Info": 0, "Warn": 0, "Error": 0, "Log": 1}

func run(pass *analysis.Pass) (any, error) {
	insp := pass.ResultOf[inspect.Analyzer].(*inspector.Inspector)
	insp.Preorder([]ast.Node{(*ast.CallExpr)(nil)}, func(n ast.Node) {
		call := n.(*ast.CallExpr)
		at, ok := logCall(pass.TypesInfo, call)
		if !ok || len(call.Args) <= at {
			return
		}
		msg := call.Args[at]
		if tv := pass.TypesInfo.Types[msg]; tv.Value == nil || tv.Value.Kind() != constant.String {
			pass.Reportf(msg.Pos(), "hclog message is not a constant string: log a fixed message and put what varies in key/value pairs")
			return
		}
		if kvs := call.Args[at+1:]; !call.Ellipsis.IsValid() && len(kvs)%2 == 1 {
			pass.Reportf(kvs[len(kvs)-1].Pos(), "hclog call has an odd number of key/value arguments: a key has no value")
		}
	})
	return nil, nil
}

// logCall reports whether call is a logging method of an hclog type, and where its message is.
// Methods reached through an embedded hclog.Logger count: the callee is still hclog's.
func logCall(info *types.Info, call *ast.CallExpr) (msgAt int, ok bool) {
	fn, isFunc := typeutil.Callee(info, call).(*types.Func)
	if !isFunc || fn.Pkg() == nil || fn.Pkg().Path() != hclogPath {
		return 0, false
	}
	if sig, _ := fn.Type().(*types.Signature); sig == nil || sig.Recv() == nil {
		return 0, false
	}
	msgAt, ok = msgArg[fn.Name()]
	return msgAt, ok
}
