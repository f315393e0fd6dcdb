// A module of its own, so that tokenmill itself does not depend on the
// identifier it did not choose.
module tokenmill/pipelines/bench/langid

go 1.26

require (
	github.com/abadojack/whatlanggo v1.0.1
	github.com/pemistahl/lingua-go v1.4.0
)

require (
	github.com/shopspring/decimal v1.3.1 // indirect
	golang.org/x/exp v0.0.0-20221106115401-f9659909a136 // indirect
	google.golang.org/protobuf v1.31.0 // indirect
)
