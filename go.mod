module github.com/softrdma/softrdma

go 1.26
